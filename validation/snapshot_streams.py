"""Allocator event streams from recorded GPU runs, in the plain form the allocator replay reads.

A GPU run recorded with torch.cuda.memory._record_memory_history keeps every allocator event:
alloc, free_requested, free_completed, segment_alloc, segment_free, each with an address and
a size (validation/gpu_results/<card>/snapshots.tar.xz, one JSON file per case). The replay
test (src/alloc/snapshot_replay_test.cc) feeds them through trainfit's model of the caching
allocator, so this writes each one as lines it can read without a JSON or xz library:

    case P:resnet18-b32-sgd
    peak 871154176 1547698176          max_memory_allocated, max_memory_reserved of the run
    pre ADDRESS SIZE POOL [FROM TO]... a segment made before recording began (the parameters)
    s ADDRESS SIZE                     segment_alloc
    a SIZE ADDRESS                     alloc, the size as requested
    f ID                               free_completed of the ID-th alloc (from 0)
    S ADDRESS SIZE                     segment_free
    end EVENTS                         the number of event lines above, so a cut file is refused

Addresses are in 512-byte units from the lowest address the run used (all are multiples of
512), which keeps the files small.

POOL is 0 (large) or 1 (small). A segment made before recording holds what the model's
construction left allocated (parameters and buffers), which the run never frees; the snapshot
does not say where in it they lie. The run's own allocations in it can only have gone where
they did not, so its free blocks are the byte ranges FROM..TO (offsets in the segment) that the
recorded allocations there cover, merged; the parameters were allocated one after another from
the segment's start, holes below come from tensors construction freed. The last range grows
towards the end by the free bytes left over: in the small pool, whose blocks are always cut to
the rounded size, the free bytes at the start are known (free at the end plus what the run
still holds there); a large segment's last range runs to its end. A segment the run never
allocates in holds its parameters from the start and one free block after them.

    /usr/bin/python3 validation/snapshot_streams.py [--snapshots TAR] [--out DIR]
"""
import argparse
import json
import os
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SNAPSHOTS = os.path.join(HERE, "gpu_results", "NVIDIA_H100_80GB_HBM3", "snapshots.tar.xz")
OUT = os.path.join(ROOT, "tests", "data", "allocator_streams")
SMALL_POOL_MAX = 1 << 20  # the largest rounded request the small pool takes


def rounded(size):
    return max(512, (size + 511) // 512 * 512)


def stream_lines(snap):
    events = snap["events"]
    created = {e[1] for e in events if e[0] == "segment_alloc"}
    pre = [s for s in snap["segments_at_end"] if s[0] not in created]
    allocated = [(e[1], e[2]) for e in events if e[0] == "alloc"]
    base = min(min(e[1] for e in events if e[0] in ("alloc", "segment_alloc")),
               min(s[0] for s in snap["segments_at_end"]))

    def at(address):
        assert (address - base) % 512 == 0, address
        return (address - base) // 512

    lines = [f"case {snap['id']}", f"peak {snap['max_memory_allocated']} {snap['max_memory_reserved']}"]
    live = {}
    for action, address, size, _ in events:
        if action == "alloc":
            live[address] = size
        elif action == "free_completed":
            live.pop(address, None)
    for address, size, pool, allocated_at_end in sorted(pre):
        extents = sorted((a - address, a - address + rounded(n)) for a, n in allocated
                         if address <= a < address + size)
        holes = []
        for start, end in extents:
            if holes and start <= holes[-1][1]:
                holes[-1][1] = max(holes[-1][1], end)
            else:
                holes.append([start, end])
        if holes and pool == "small":
            # Small blocks are always split to the rounded size, so the free bytes at the start
            # are known exactly: those free at the end and those the run still holds there.
            free = size - allocated_at_end + sum(
                rounded(n) for a, n in live.items() if address <= a < address + size)
            covered = sum(end - start for start, end in holes)
            holes[-1][1] = min(size, holes[-1][1] + max(0, free - covered))
        elif holes:
            holes[-1][1] = size
        elif allocated_at_end < size:
            holes = [[allocated_at_end, size]]  # untouched: the parameters, then a free tail
        ranges = "".join(f" {start} {end}" for start, end in holes)
        lines.append(f"pre {at(address)} {size} {int(pool == 'small')}{ranges}")
    ids = {}
    allocs = 0
    for action, address, size, _ in events:
        if action == "alloc":
            ids[address] = allocs
            allocs += 1
            lines.append(f"a {size} {at(address)}")
        elif action == "free_completed":
            lines.append(f"f {ids.pop(address)}")
        elif action == "segment_alloc":
            lines.append(f"s {at(address)} {size}")
        elif action == "segment_free":
            lines.append(f"S {at(address)} {size}")
    lines.append(f"end {sum(line[0] in 'asfS' for line in lines[2:] if not line.startswith('pre'))}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapshots", default=SNAPSHOTS)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    written = 0
    with tarfile.open(args.snapshots) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.name.endswith(".json"):
                continue
            snap = json.load(tar.extractfile(member))
            name = os.path.basename(member.name)[:-len(".json")] + ".txt"
            with open(os.path.join(args.out, name), "w") as f:
                f.write("\n".join(stream_lines(snap)) + "\n")
            written += 1
    print(f"wrote {written} streams to {args.out}")


if __name__ == "__main__":
    main()
