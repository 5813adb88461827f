"""The speed record: a fixed set of whole commands, timed and counted.

    bench/speed.py time [--build build/release] [--against OTHER/trainfit] [--runs 7]
                        [--instructions]
        Wall time of each command as a whole process (median of --runs runs; with --against,
        the two binaries run in turn, so that both see the same load), and with --instructions
        the instructions each retires, counted by callgrind (valgrind), which does not depend on
        the machine's load. A Markdown table, as the README's Performance section gives it.

    bench/speed.py counts --build build/dev (--check FILE | --record FILE)
        The heap allocations each command makes, counted by AddressSanitizer in the sanitizer
        build (ASAN_OPTIONS=print_stats=1), on one thread (TRAINFIT_THREADS=1): a count, not a
        time, so it does not move with the machine's load or its cores. --record writes them to FILE; --check fails when a command makes more
        than 1.5 times the allocations FILE recorded for it (a change that doubles the work), and
        says when one makes less than 1/1.5 of them (record again to keep the gain).

Run from anywhere; the commands run in the repository root (they read examples/).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# The commands the record follows: the four of the speed issue, an LLM with LoRA, a what-if,
# a launch plan, and the program's start alone.
COMMANDS = [
    "--version",
    "estimate --model resnet50 --batch 256 --gpu rtx4090",
    "estimate --model act --batch 8 --gpu rtx4090",
    "fit --model resnet50 --gpu all",
    "fit --model act --gpu all",
    "fit --hf-config examples/llama-3-8b.json --seq-len 2048 --precision bf16 --gpu rtx4090 "
    "--lora r=16",
    "fit --model resnet50 --gpu rtx4090 --what-if",
    "launch --model resnet50 --optimizer momentum --gpu rtx4090 --gpus 4 --baseline-batch 512 "
    "--baseline-lr 0.1 --cores 32",
]

MARGIN = 1.5  # --check: a command may make this many times its recorded allocations


def run(binary, command, env=None):
    result = subprocess.run([binary] + command.split(), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"speed.py: `trainfit {command}` failed: {tail[0]}")
    return result.stderr


def wall_ms(binary, command):
    start = time.perf_counter()
    run(binary, command)
    return (time.perf_counter() - start) * 1000


def instructions(binary, command):
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          binary] + command.split(), cwd=ROOT, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        sys.exit(f"speed.py: callgrind could not count `trainfit {command}`")
    return int(found.group(1))


def allocations(binary, command):
    # On one thread: the same work on any machine, whatever its cores.
    env = dict(os.environ, ASAN_OPTIONS="atexit=1:print_stats=1:detect_leaks=0",
               TRAINFIT_THREADS="1")
    stats = run(binary, command, env)
    found = re.search(r"Stats: \d+M malloced \(\d+M for red zones\) by (\d+) calls", stats)
    if not found:
        sys.exit(f"speed.py: {binary} printed no allocation statistics: is it the sanitizer "
                 "build (cmake --preset dev)?")
    return int(found.group(1))


def time_table(args):
    binaries = [os.path.join(args.build, "trainfit")]
    if args.against:
        binaries.append(args.against)
    for b in binaries:
        if not os.access(b, os.X_OK):
            sys.exit(f"speed.py: no executable {b} (hint: cmake --preset release && "
                     "cmake --build --preset release)")
    if args.instructions and not shutil.which("valgrind"):
        sys.exit("speed.py: --instructions needs valgrind (apt-get install valgrind)")
    names = ["this build"] + (["--against"] if args.against else [])
    head = "| command | " + " | ".join(f"{n}: ms" for n in names)
    if args.instructions:
        head += " | " + " | ".join(f"{n}: instructions" for n in names)
    print(head + " |")
    print("|---" * (1 + len(names) * (2 if args.instructions else 1)) + "|")
    for command in COMMANDS:
        times = {b: [] for b in binaries}
        for b in binaries:
            run(b, command)  # warm the page cache
        for _ in range(args.runs):
            for b in binaries:
                times[b].append(wall_ms(b, command))
        cells = [f"{statistics.median(times[b]):.1f}" for b in binaries]
        if args.instructions:
            cells += [f"{instructions(b, command):,}" for b in binaries]
        print(f"| `trainfit {command}` | " + " | ".join(cells) + " |", flush=True)


def counts(args):
    binary = os.path.join(args.build, "trainfit")
    if not os.access(binary, os.X_OK):
        sys.exit(f"speed.py: no executable {binary} (hint: cmake --preset dev && "
                 "cmake --build --preset dev)")
    measured = {c: allocations(binary, c) for c in COMMANDS}
    if args.record:
        with open(args.record, "w") as f:
            json.dump({"what": "heap allocations per command, counted by AddressSanitizer in "
                               "the sanitizer build (bench/speed.py counts)",
                       "allocations": measured}, f, indent=2)
            f.write("\n")
        print(f"recorded {len(measured)} commands in {args.record}")
        return 0
    with open(args.check) as f:
        recorded = json.load(f)["allocations"]
    failed = 0
    for command, count in measured.items():
        if command not in recorded:
            print(f"FAIL `trainfit {command}`: no recorded count (bench/speed.py counts "
                  f"--record {args.check})")
            failed += 1
            continue
        ratio = count / recorded[command]
        verdict = "ok"
        if ratio > MARGIN:
            verdict = f"FAIL: more than {MARGIN}x the recorded allocations"
            failed += 1
        elif ratio < 1 / MARGIN:
            verdict = "ok, and fewer than recorded by more than the margin: record again"
        print(f"{count:>12,} allocations ({ratio:5.2f}x of {recorded[command]:,}) "
              f"`trainfit {command}`: {verdict}")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("time", help="wall time (and instructions) of each command")
    t.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    t.add_argument("--against", help="another trainfit binary, run in turn with this one")
    t.add_argument("--runs", type=int, default=7)
    t.add_argument("--instructions", action="store_true", help="count them with callgrind")
    c = sub.add_parser("counts", help="heap allocations of each command (sanitizer build)")
    c.add_argument("--build", default=os.path.join(ROOT, "build", "dev"))
    group = c.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", help="the recorded counts to check against")
    group.add_argument("--record", help="where to write the counts")
    args = parser.parse_args()
    if args.mode == "time":
        time_table(args)
        return 0
    return counts(args)


if __name__ == "__main__":
    sys.exit(main())
