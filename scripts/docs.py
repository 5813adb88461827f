"""The documentation's checks: every `trainfit` command README.md and docs/ show with its output
prints what the page shows; every relative link and anchor resolves; docs/options.md is the
option table's.

    /usr/bin/python3 scripts/docs.py examples --trainfit build/release/trainfit        # check
    /usr/bin/python3 scripts/docs.py examples --trainfit build/release/trainfit --update
    /usr/bin/python3 scripts/docs.py links
    TRAINFIT_BUILD=build/release /usr/bin/python3 scripts/docs.py options [--update]

An example is a fenced block whose lines start with `$ trainfit ...` (or `$ build/release/
trainfit ...`; a trailing backslash continues the command), each followed by what it prints
(standard output, then standard error). A line `...` in the output stands for any lines. A
`$ PYTHONPATH=python ...` line before them (python3 -m trainfit.trace writing the trace they
read) runs first for what it writes, and must succeed; its output, with its timings, is not
compared. Commands run in order, in a scratch folder that links every entry of the repository's
root, so that the paths the pages use resolve and what they write goes nowhere. A block after a line `<!-- docs: not run (WHY) -->` is
shown but not run: its output depends on the machine (timings, this host's hardware); the check
lists them with their reasons.
"""
import argparse
import difflib
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Set, Tuple

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
NOT_RUN = re.compile(r"<!-- docs: not run \((.+)\) -->")


def pages() -> List[str]:
    """README.md and every page of docs/, as paths from the root."""
    return ["README.md"] + sorted(os.path.relpath(p, ROOT)
                                  for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


class Example:
    """One command of a page and the output the page shows for it."""

    def __init__(self, page: str, line: int, command: str, output: List[str],
                 skipped: Optional[str]):
        """page: where; line: the command's first line (1-based); output: the lines shown."""
        self.page, self.line, self.command, self.output = page, line, command, output
        self.skipped = skipped
        self.setup = False  # a PYTHONPATH=python ... command: run for what it writes
        self.output_lines: Tuple[int, int] = (0, 0)  # [first, end) of the output, 0-based


def examples(page: str) -> List[Example]:
    """The `$ trainfit` commands in the page's fenced blocks, with their shown output."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        lines = f.read().split("\n")
    found: List[Example] = []
    fence = False
    skipped: Optional[str] = None
    current: Optional[Example] = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            if fence and current is not None:
                current.output_lines = (current.output_lines[0], i)
                current = None
            fence = not fence
            if not fence:
                skipped = None
            i += 1
            continue
        if not fence:
            m = NOT_RUN.search(line)
            if m:
                skipped = m.group(1)
            elif line.strip():
                skipped = None if not line.startswith("<!--") else skipped
            i += 1
            continue
        if line.startswith("$ "):
            if current is not None:
                current.output_lines = (current.output_lines[0], i)
            start = i
            command = line[2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            words = command.split()
            if words and words[0] in ("trainfit", "build/release/trainfit", "PYTHONPATH=python"):
                current = Example(page, start + 1, command, [], skipped)
                current.setup = words[0] == "PYTHONPATH=python"
                current.output_lines = (i + 1, i + 1)
                found.append(current)
            else:
                current = None
        elif current is not None:
            current.output.append(line)
        i += 1
    return found


def run(example: Example, trainfit: str, scratch: str) -> List[str]:
    """What the example's command prints, as lines (stdout, then stderr)."""
    if example.setup:
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        done = subprocess.run(["bash", "-c", example.command.split(" ", 1)[1]], cwd=scratch,
                              env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return [f"failed ({done.returncode}): {done.stderr.strip()}"]
        return example.output
    words = shlex.split(example.command)
    done = subprocess.run([trainfit, *words[1:]], cwd=scratch, capture_output=True, text=True,
                          timeout=600)
    text = done.stdout + done.stderr
    return text.rstrip("\n").split("\n")


def scratch_folder(where: str) -> None:
    """Links every entry of the repository's root into `where`."""
    for name in os.listdir(ROOT):
        if name != ".git":
            os.symlink(os.path.join(ROOT, name), os.path.join(where, name))


def matches(shown: List[str], printed: List[str]) -> bool:
    """Whether `printed` is what `shown` shows, a line `...` standing for any lines."""
    pattern = "\n".join(re.escape(line) if line.strip() != "..." else "(?:.*\n)*?.*"
                        for line in shown)
    return re.fullmatch(pattern, "\n".join(printed)) is not None


def merge(shown: List[str], printed: List[str]) -> List[str]:
    """`printed`, with each `...` of the page kept where the lines around it are still printed
    (it then stands for what is printed between them); elsewhere the page gets every line."""
    out: List[str] = []
    p = 0  # printed lines up to here are in `out`
    for k, line in enumerate(shown):
        if line.strip() != "...":
            continue
        before = shown[k - 1] if k > 0 else None
        after = next((s for s in shown[k + 1:] if s.strip() != "..."), None)
        start = p
        if before is not None:
            if before not in printed[p:]:
                continue
            start = printed.index(before, p) + 1
        end = len(printed)
        if after is not None:
            if after not in printed[start:]:
                continue
            end = printed.index(after, start)
        if end > start:
            out += printed[p:start] + [line]
            p = end
    return out + printed[p:]


def check_examples(trainfit: str, update: bool) -> int:
    """Runs every example; with `update`, writes what they print into the pages."""
    failures = 0
    ran = 0
    with tempfile.TemporaryDirectory() as scratch:
        scratch_folder(scratch)
        for page in pages():
            found = examples(page)
            if not found:
                continue
            path = os.path.join(ROOT, page)
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            changes = []
            for ex in found:  # in order: a setup command writes what the next ones read
                if ex.skipped:
                    print(f"{page}:{ex.line}: not run ({ex.skipped}): {ex.command}")
                    continue
                if not ex.setup and not any(line.strip() for line in ex.output):
                    continue  # a command shown without its output
                printed = run(ex, trainfit, scratch)
                ran += 1
                if matches(ex.output, printed):
                    continue
                if update and not ex.setup:
                    changes.append((ex.output_lines, merge(ex.output, printed)))
                    print(f"{page}:{ex.line}: updated: {ex.command}")
                    continue
                failures += 1
                print(f"{page}:{ex.line}: `{ex.command}` prints other than the page shows:")
                sys.stdout.writelines(difflib.unified_diff(
                    [s + "\n" for s in ex.output], [s + "\n" for s in printed], "the page",
                    "printed", n=2))
            for (first, end), new in reversed(changes):  # earlier lines keep their numbers
                lines[first:end] = new
            if changes:
                with open(path, "w", encoding="utf-8") as f:
                    f.write("\n".join(lines))
    print(f"{ran} examples run, {failures} differ")
    return 1 if failures else 0


def slug(heading: str) -> str:
    """The anchor a code host gives a heading: lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: str) -> Set[str]:
    """Every heading anchor of a page, repeated headings numbered as code hosts number them."""
    out: Set[str] = set()
    seen: Dict[str, int] = {}
    fence = False
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
                continue
            m = re.match(r"^#{1,6} (.*)", line)
            if m and not fence:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                out.add(s if n == 0 else f"{s}-{n}")
    return out


def check_links() -> int:
    """Every relative link of every page names a file that exists, and an anchor its page has."""
    bad = 0
    for page in pages():
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # code is not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            linked = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(os.path.join(ROOT, linked)):
                print(f"{page}: link to {target}: no file {linked}")
                bad += 1
            elif anchor and linked.endswith(".md") and anchor not in anchors(linked):
                print(f"{page}: link to {target}: {linked} has no heading #{anchor}")
                bad += 1
    print(f"links of {len(pages())} pages checked, {bad} broken")
    return 1 if bad else 0


def options_page() -> str:
    """docs/options.md as the option table gives it."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from trainfit import api  # noqa: E402 (the binding, from TRAINFIT_BUILD)

    rows = api._binding().request_options()
    titles = {"model": "The model", "training": "Training", "multi-GPU": "More than one GPU",
              "baseline": "The recipe to reproduce", "device": "The device"}
    out = ["# Options", "",
           "Every option of a training request: the command-line flag, the Python keyword "
           "(`trainfit.estimate(..., key=value)`), its kind and default, and the commands that "
           "take it. Printed from the option table (`src/pipeline/request_options.cc`) by "
           "`scripts/update-docs.sh`; the test command checks that this page is the table's.",
           "", "Commands: " + ", ".join(f"`{c}`" for c in
                                         ("estimate", "fit", "summary", "launch", "compare",
                                          "loader")) + "; Python has all but `loader`.", ""]
    for group, title in titles.items():
        out += [f"## {title}", "", "| flag | Python | kind | default | commands | what |",
                "|---|---|---|---|---|---|"]
        for r in rows:
            if r["group"] != group:
                continue
            kind = r["kind"] if not r["choices"] else " \\| ".join(r["choices"])
            commands = ", ".join(r["commands"])
            if r["refused"]:
                commands += "; refused by " + ", ".join(r["refused"]) + f": {r['refusal']}"
            what = r["help"] + (f". {r['note']}" if r["note"] else "")
            default = f"`{r['default']}`" if r["default"] else ""
            out.append(f"| `{r['flag']}` | `{r['key']}` | {kind} | {default} | {commands} | "
                       f"{what.replace('|', '/')} |")
        out.append("")
    return "\n".join(out)


def check_options(update: bool) -> int:
    """docs/options.md is the table's, and names every option."""
    path = os.path.join(ROOT, "docs", "options.md")
    want = options_page()
    if update:
        with open(path, "w", encoding="utf-8") as f:
            f.write(want)
        print("docs/options.md written")
        return 0
    with open(path, encoding="utf-8") as f:
        have = f.read()
    if have != want:
        sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True),
                                                   "docs/options.md", "the option table"))
        print("docs/options.md is not the option table's: run scripts/update-docs.sh")
        return 1
    print("docs/options.md is the option table's")
    return 0


# ---- api.py's signatures, generated from the option table.

# Each function's own parameters around the request options its command takes: those before
# (the positional model), after, and the options whose annotation or default differ from their
# kind's (a live module's optimizer may be a function; fit and summary search or default the
# batch; launch cannot run without its GPU and baseline).
LIVE = 'model: Union[str, Any, None] = None, example_batch: Any = None, *, ' \
       'loss_fn: Optional[Callable[[Any, Any], Any]] = None'
LIVE_OPTIMIZER = 'optimizer: Union[str, Callable[[Any], Any], None] = None'
FUNCTIONS = {
    "estimate": (LIVE, 'explain: bool = False, timeline: Union[str, "os.PathLike[str]", None] = '
                       'None', {"optimizer": LIVE_OPTIMIZER}),
    "fit": (LIVE, 'what_if: bool = False, target_batch: Optional[int] = None, '
                  'allow_model_changes: bool = False, rank: str = "memory"',
            {"batch": "batch: Optional[int] = None"}),
    "summary": (LIVE, LIVE_OPTIMIZER + ", depth: int = -1",
                {"batch": "batch: Optional[int] = None"}),
    "launch": ("model: Optional[str] = None, *", "cores: Optional[int] = None",
               {"gpu": "gpu: str", "gpus": "gpus: int", "baseline_batch": "baseline_batch: int",
                "baseline_lr": "baseline_lr: float"}),
}
ANNOTATIONS = {
    "float": "Optional[float]", "size": "Optional[Size]", "fraction": "Union[float, str, None]",
    "shape": "Optional[Shape]", "list": "Union[str, Sequence[str], None]",
    "key=value": "Optional[Mapping[str, Any]]", "lora": "Union[str, Mapping[str, Any], None]",
    "file": 'Union[str, "os.PathLike[str]", None]', "trace": "Optional[TraceSource]",
}


def parameter(row: Dict[str, Any]) -> str:
    """An option as a keyword of api.py: its annotation and default from its kind."""
    key, kind, default = str(row["key"]), str(row["kind"]), str(row["default"])
    if kind == "bool":
        return f"{key}: bool = {default == 'true'}"
    if kind == "int":
        return f"{key}: int = {default}" if default else f"{key}: Optional[int] = None"
    if kind in ("enum", "text"):
        return f'{key}: str = "{default}"' if default else f"{key}: Optional[str] = None"
    return f"{key}: {ANNOTATIONS[kind]} = None"


def signature(rows: List[Dict[str, Any]], name: str) -> List[str]:
    """The def line of api.py's `name`, wrapped at 100 columns."""
    before, after, special = FUNCTIONS[name]
    required = [special[k] for k in special if ":" in special[k] and "=" not in special[k]]
    options = [special.get(str(r["key"]), parameter(r)) for r in rows
               if name in r["commands"] and r["key"] != "model"]
    options = [o for o in options if o not in required]
    head = before.split(", ") if name != "launch" else [before]
    words = ", ".join(head + required + options + [after]).split(", ")
    # Join back the pieces a comma inside brackets split.
    params: List[str] = []
    for w in words:
        if params and params[-1].count("[") > params[-1].count("]"):
            params[-1] += ", " + w
        else:
            params.append(w)
    lines = [f"def {name}("]
    indent = " " * len(lines[0])
    for i, p in enumerate(params):
        piece = p + (", " if i + 1 < len(params) else ") -> Report:")
        if len(lines[-1]) + len(piece.rstrip()) > 100:
            lines[-1] = lines[-1].rstrip()
            lines.append(indent)
        lines[-1] += piece
    return [line.rstrip() for line in lines]


def check_api(update: bool) -> int:
    """api.py's estimate, fit, summary and launch take what the table gives their commands."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from trainfit import api  # noqa: E402

    rows = api._binding().request_options()
    path = os.path.join(ROOT, "python", "trainfit", "api.py")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    stale = []
    for name in FUNCTIONS:
        start = lines.index(next(l for l in lines if l.startswith(f"def {name}(")))
        end = next(i for i in range(start, len(lines)) if lines[i].endswith("-> Report:")) + 1
        want = signature(rows, name)
        if lines[start:end] != want:
            stale.append(name)
            lines[start:end] = want
    if update:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print(f"api.py: {', '.join(stale) or 'no'} signatures rewritten")
        return 0
    if stale:
        print(f"api.py: the signatures of {', '.join(stale)} are not the option table's: run "
              "scripts/update-docs.sh")
        return 1
    print("api.py's signatures are the option table's")
    return 0


def main() -> int:
    """The subcommand's check; non-zero when it fails."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    ex = sub.add_parser("examples", help="run every example and compare its output")
    ex.add_argument("--trainfit", required=True, help="the trainfit binary")
    ex.add_argument("--update", action="store_true", help="write what they print instead")
    sub.add_parser("links", help="check relative links and anchors")
    op = sub.add_parser("options", help="docs/options.md and api.py against the option table")
    op.add_argument("--update", action="store_true", help="write them instead")
    args = ap.parse_args()
    if args.what == "examples":
        return check_examples(os.path.abspath(args.trainfit), args.update)
    if args.what == "links":
        return check_links()
    return check_options(args.update) | check_api(args.update)


if __name__ == "__main__":
    sys.exit(main())
