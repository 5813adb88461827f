#!/usr/bin/env bash
# Formatting and static analysis of src/, as the test suite runs them.
#   scripts/lint.sh format            clang-format --dry-run --Werror
#   scripts/lint.sh tidy BUILD_DIR    clang-tidy on every source, with BUILD_DIR/compile_commands.json
#                                     (scripts/tidy.py: skips what is unchanged since found clean)
#   scripts/lint.sh python BUILD_DIR  pyflakes on the Python; mypy --strict on the package's API
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t sources < <(find src -name '*.cc' | sort)
mapfile -t headers < <(find src -name '*.h' | sort)
case "${1:-}" in
  format)
    clang-format --dry-run --Werror "${sources[@]}" "${headers[@]}"
    echo "clang-format: ${#sources[@]} sources and ${#headers[@]} headers formatted"
    ;;
  tidy)
    build="${2:?usage: scripts/lint.sh tidy BUILD_DIR}"
    # Each source whose translation unit changed since it was found clean (scripts/tidy.py).
    /usr/bin/python3 scripts/tidy.py "$build"
    ;;
  python)
    build="${2:?usage: scripts/lint.sh python BUILD_DIR}"
    /usr/bin/python3 -m pyflakes python tests/python tests/data/traces validation bench setup.py scripts/tidy.py scripts/docs.py
    /usr/bin/python3 -m mypy --strict --allow-untyped-calls --follow-imports=silent --cache-dir "$build/mypy_cache" \
      python/trainfit/*.py python/trainfit/_trainfit.pyi
    # Every function of the package has a docstring.
    /usr/bin/python3 - python/trainfit/*.py <<'PY'
import ast, sys
missing = [f"{path}:{node.lineno}: {node.name} has no docstring"
           for path in sys.argv[1:]
           for node in ast.walk(ast.parse(open(path).read()))
           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
           and not ast.get_docstring(node)]
print("\n".join(missing) or "docstrings: every function has one")
sys.exit(1 if missing else 0)
PY
    echo "pyflakes and mypy: clean"
    ;;
  *)
    echo "usage: scripts/lint.sh format | tidy BUILD_DIR | python BUILD_DIR" >&2
    exit 2
    ;;
esac
