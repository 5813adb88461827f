#!/usr/bin/python3
"""clang-tidy on every source under src/, skipping a source whose whole translation unit is one
already found clean.

    scripts/tidy.py BUILD_DIR            check (what `scripts/lint.sh tidy` and ctest run)
    scripts/tidy.py BUILD_DIR --all      check every source, whatever is recorded
    scripts/tidy.py BUILD_DIR --record   check, then record the clean ones in scripts/tidy-clean.txt

clang-tidy takes about ten seconds a source here, most of it parsing the headers, so the whole
tree costs over ten minutes of two cores. Its verdict depends only on what it reads, so a source
is checked again only when any of that changed. The key of a source is a SHA-256 over:

- the clang-tidy and compiler versions and the .clang-tidy configuration;
- the source's compile flags from BUILD_DIR/compile_commands.json, with the checkout's path
  replaced so that keys agree between clones;
- the name and content of every file the translation unit includes, project and system headers
  alike, as the compiler's dependency list (-M) names them.

scripts/tidy-clean.txt lists the keys of sources found clean (`KEY PATH` lines), and is committed
so that a fresh clone checks only what changed since. Keys found clean in a run are also written
to BUILD_DIR/tidy-clean.txt. A source that fails is never recorded.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "scripts", "tidy-clean.txt")


def version(command):
    """What a tool prints for --version, on one line."""
    out = subprocess.run([command, "--version"], capture_output=True, text=True, check=True)
    return " ".join(out.stdout.split())


def dependencies(arguments, directory, source):
    """Every file the translation unit includes, as the compiler's -M lists them."""
    args = []
    skip = False
    for arg in arguments:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if arg in ("-c", "-MD", "-MMD") or arg == source:
            continue
        args.append(arg)
    out = subprocess.run(args + ["-M", "-MT", "x", source], cwd=directory, capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"tidy: cannot list the headers of {source}: {out.stderr.strip()}")
    names = out.stdout.replace("\\\n", " ").split()[1:]
    # Sorted by the names the key uses, so that the order is the same in every clone.
    return sorted(set(os.path.normpath(os.path.join(directory, n)) for n in names), key=relative)


def relative(text):
    """The checkout's absolute path written as '.', so that keys agree between clones."""
    return text.replace(ROOT, ".")


def arguments(entry):
    """A compile_commands.json entry's command as a list."""
    return entry.get("arguments") or shlex.split(entry["command"])


def key(entry, common):
    """The SHA-256 of what clang-tidy reads for one compile_commands.json entry."""
    digest = hashlib.sha256(common)
    digest.update(relative(" ".join(a for a in arguments(entry) if a != entry["file"])).encode())
    for name in dependencies(arguments(entry), entry["directory"], entry["file"]):
        with open(name, "rb") as f:
            digest.update(f"\n{relative(name)}\n".encode())
            digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def load(path):
    """KEY PATH lines as a set of keys; an absent file is empty."""
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {line.split()[0] for line in f if line.strip()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build")
    parser.add_argument("--all", action="store_true", help="check every source")
    parser.add_argument("--record", action="store_true",
                        help="write the clean sources' keys to scripts/tidy-clean.txt")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f)
                   if os.path.relpath(e["file"], ROOT).startswith("src" + os.sep)]
    entries.sort(key=lambda e: e["file"])
    if not entries:
        sys.exit(f"tidy: no source under src/ in {build}/compile_commands.json")
    with open(os.path.join(ROOT, ".clang-tidy"), "rb") as f:
        config = f.read()
    common = f"{version('clang-tidy')}\n{version(arguments(entries[0])[0])}\n".encode() + config
    recorded = set() if args.all else load(RECORD)
    workers = os.cpu_count() or 1
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        keys = list(pool.map(lambda e: key(e, common), entries))
    todo = [(e, k) for e, k in zip(entries, keys) if k not in recorded]

    def tidy(item):
        entry, _ = item
        return subprocess.run(["clang-tidy", "-p", build, "--quiet", entry["file"]],
                              capture_output=True, text=True, cwd=ROOT)

    failed = []
    clean = [(e, k) for e, k in zip(entries, keys) if k in recorded]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for item, out in zip(todo, pool.map(tidy, todo)):
            path = os.path.relpath(item[0]["file"], ROOT)
            if out.returncode == 0:
                clean.append(item)
                print(f"clean    {path}", flush=True)
            else:
                failed.append(path)
                print(f"FAILED   {path}\n{out.stdout}{out.stderr}", flush=True)
    lines = sorted(f"{k} {os.path.relpath(e['file'], ROOT)}\n" for e, k in clean)
    with open(os.path.join(build, "tidy-clean.txt"), "w") as f:
        f.writelines(lines)
    if args.record:
        with open(RECORD, "w") as f:
            f.writelines(lines)
    print(f"clang-tidy: {len(clean)} of {len(entries)} sources clean; {len(todo)} checked now, "
          f"the other {len(entries) - len(todo)} unchanged since found clean "
          f"(scripts/tidy-clean.txt)")
    if failed:
        print(f"clang-tidy: {len(failed)} failed: {' '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
