"""trainfit loader's plans against real DataLoader runs on this machine (PyTorch's DataLoader,
CPU; the GPU's step is a sleep of the step time, as a GPU would take it).

For each synthetic dataset in loader_datasets.py it probes the Dataset (python3 -m
trainfit.loader), asks `trainfit loader` for a plan and runs a real DataLoader, each run in a
fresh process:

  decode        throughput with the recommended settings within 15% of the prediction, at a
                step time the loader cannot feed and one it can; the recommended settings reach
                90% of the throughput of the fastest worker count from 0 to one past the
                cores (the median ratio of five paired runs)
  labels        host RAM (PSS summed over main and workers) after one epoch within 15% of the
                prediction with 2 and 4 workers, and after four epochs with 2
  labels_numpy  the same with the labels in one NumPy array: both prediction and measurement
                show the saving
  large         /dev/shm in use with the batches in flight within 15% of the prediction
  seed 002      labels under a memory limit this check sets (a child memory cgroup): the planner
                warns before the run and the run is killed; the NumPy version fits and runs

    /usr/bin/python3 validation/check_loader.py --trainfit build/dev/trainfit
    /usr/bin/python3 validation/check_loader.py run --dataset decode --workers 2 ...   (one run)

Exit 0 when every check passes; each check prints predicted, measured and the error.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), HERE]))
TOLERANCE = 0.15
LABELS = {"n": 30000}  # a few hundred MB of Python objects


# ----------------------------------------------------------------------------------------------
# One real DataLoader run (the `run` subcommand, in its own process).

def pss_of(pid):
    from trainfit.loader import process_memory
    m = process_memory(pid)
    return m["pss_bytes"] if m else 0


def shm_used():
    s = os.statvfs("/dev/shm")
    return (s.f_blocks - s.f_bfree) * s.f_frsize


def run_loader(args):
    import torch
    import loader_datasets
    dataset = getattr(loader_datasets, args.dataset)(**json.loads(args.kwargs))
    kwargs = {}
    if args.workers > 0:
        kwargs = {"prefetch_factor": args.prefetch, "persistent_workers": args.persistent}
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers, drop_last=True, **kwargs)
    shm_before = shm_used()
    result = {"epochs": [], "shm_bytes": 0}
    begin = time.monotonic()
    arrivals = []
    for epoch in range(args.epochs):
        it = iter(loader)
        batch = None
        # As a training loop: the batch stays alive through its step and until the next one
        # replaces it.
        for batch in it:
            arrivals.append(time.perf_counter())
            if args.step > 0:
                time.sleep(args.step)
            result["shm_bytes"] = max(result["shm_bytes"], shm_used() - shm_before)
            if args.seconds and time.monotonic() - begin > args.seconds:
                break
        del batch
        workers = getattr(it, "_workers", [])
        total = pss_of("self") + sum(pss_of(w.pid) for w in workers if w.is_alive())
        result["epochs"].append({"pss_bytes": total, "batches": len(arrivals)})
        if args.seconds and time.monotonic() - begin > args.seconds:
            break
    skip = max(args.workers, 1)  # the workers' first round arrives together
    result["samples_per_s"] = (len(arrivals) - skip) * args.batch / (arrivals[-1] -
                                                                     arrivals[skip - 1])
    print(json.dumps(result))
    return 0


def real_run(dataset, kwargs, batch, workers, prefetch=2, step=0.0, seconds=0.0, epochs=1,
             persistent=True, cgroup=None):
    cmd = [sys.executable, os.path.abspath(__file__), "run", "--dataset", dataset,
           "--kwargs", json.dumps(kwargs), "--batch", str(batch), "--workers", str(workers),
           "--prefetch", str(prefetch), "--step", str(step), "--seconds", str(seconds),
           "--epochs", str(epochs)] + (["--persistent"] if persistent else [])
    preexec = None
    if cgroup:
        def preexec():
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600,
                          preexec_fn=preexec)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        return {"returncode": done.returncode, "stderr": f"exit {done.returncode}: {last}"}
    return json.loads(done.stdout)


# ----------------------------------------------------------------------------------------------
# Probes and plans.

def probe(dataset, kwargs, batch, out, seconds=16):
    cmd = [sys.executable, "-m", "trainfit.loader", "--dataset", f"loader_datasets:{dataset}",
           "--kwargs", json.dumps(kwargs), "--batch", str(batch), "--seconds", str(seconds),
           "--out", out]
    subprocess.run(cmd, env=ENV, check=True, capture_output=True, text=True, timeout=600)
    return out


def plan(trainfit, profile, *args):
    cmd = [trainfit, "loader", "--profile", profile, "--pin-memory", "false", "--json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


class Checks:
    def __init__(self):
        self.failed = []

    def near(self, what, predicted, measured, tolerance=TOLERANCE):
        error = predicted / measured - 1
        ok = abs(error) <= tolerance
        print(f"  {'ok ' if ok else 'FAIL'} {what}: predicted {predicted:,.0f}, measured "
              f"{measured:,.0f} ({error:+.1%})", flush=True)
        if not ok:
            self.failed.append(what)

    def true(self, what, ok, detail=""):
        print(f"  {'ok ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
        if not ok:
            self.failed.append(what)


def check_decode(trainfit, folder, checks):
    print("decode: a JPEG decoded, cropped and resized per sample", flush=True)
    batch = 32
    # Throughput on a shared VM drifts: on the 2-vCPU host these checks were written on, five 5-s
    # runs at 2 workers in a row gave 784, 819, 639, 627 and 667 samples/s for the same CPU time
    # (how the host schedules the two vCPUs, not the loader), and the fast and slow spells last
    # minutes. So the checks are paired and repeated: three rounds, each a probe, its plans and
    # right after them a real run of each plan; the round with the median error is reported.
    cores = len(os.sched_getaffinity(0))
    steps = (0.001, 0.1)  # a GPU the loader cannot feed, and one it can
    rounds = {step: [] for step in steps}
    for i in range(3):
        # The probe's default length: 5.5 s at each worker count, as long as the real runs.
        profile = probe("decode", {}, batch, os.path.join(folder, f"decode{i}.json"), seconds=30)
        for step in steps:
            p = plan(trainfit, profile, "--step-time", f"{step}s", "--batch", str(batch))
            got = real_run("decode", {}, batch, p["num_workers"],
                           prefetch=p["prefetch_factor"] or 2, step=step, seconds=5)
            rounds[step].append((p, got["samples_per_s"]))
    for step in steps:
        pairs = sorted(rounds[step], key=lambda pair: pair[0]["samples_per_s"] / pair[1])
        p, measured = pairs[1]
        n = p["num_workers"]
        print(f"  step {step * 1e3:g} ms: plan {n} workers, prefetch {p['prefetch_factor']}, "
              f"bottleneck {p['bottleneck']}; three rounds, predicted/measured: "
              + ", ".join(f"{q['samples_per_s']:.0f}/{m:.0f}" for q, m in pairs), flush=True)
        checks.near(f"decode, {step * 1e3:g} ms step: samples/s with the plan", p["samples_per_s"],
                    measured)

        # Is the plan's count as fast as any? A sweep finds the fastest count; then the plan's
        # count and the fastest run in turn, five pairs, each pair in the other order from the
        # last, and the check takes the median of the pairs' ratios. A pair's runs are seconds
        # apart, so the host's slow and fast spells fall on both (single runs of one setting
        # spread by +-10% here), and the sweep's own figures, the largest of several single runs
        # and so biased high, are left out.
        sweep = {w: real_run("decode", {}, batch, w, step=step, seconds=5)["samples_per_s"]
                 for w in range(0, cores + 2)}
        fastest = max(sweep, key=sweep.get)
        prefetch = p["prefetch_factor"] or 2
        ratios = []
        for i in range(5 if fastest != n else 0):
            order = ((n, prefetch), (fastest, 2)) if i % 2 == 0 else ((fastest, 2), (n, prefetch))
            got = {w: real_run("decode", {}, batch, w, prefetch=f, step=step,
                               seconds=5)["samples_per_s"] for w, f in order}
            ratios.append(got[n] / got[fastest])
        ratio = statistics.median(ratios) if ratios else 1.0
        checks.true(f"decode, {step * 1e3:g} ms step: the plan reaches 90% of the best worker "
                    f"count", ratio >= 0.9,
                    f"{n} workers give {ratio:.0%} of the samples/s of {fastest} (" +
                    ("median of 5 pairs: " + ", ".join(f"{r:.2f}" for r in ratios) + "; "
                     if ratios else "") +
                    "sweep: " + ", ".join(f"{w}: {r:.0f}" for w, r in sweep.items()) + ")")


def check_labels(trainfit, folder, checks):
    print("labels: Python objects per sample (seed 002), and the NumPy fix", flush=True)
    batch = 64
    predicted = {}
    measured = {}
    for name in ("labels", "labels_numpy"):
        profile = probe(name, LABELS, batch, os.path.join(folder, f"{name}.json"))
        for workers in (2, 4):
            p = plan(trainfit, profile, "--step-time", "1ms", "--batch", str(batch),
                     "--num-workers", str(workers))
            epochs = 4 if workers == 2 else 1
            got = real_run(name, LABELS, batch, workers, epochs=epochs)
            first = got["epochs"][0]["pss_bytes"]
            checks.near(f"{name}, {workers} workers: host RAM after the first epoch",
                        p["host_ram_first_epoch_bytes"], first)
            if epochs > 1:
                checks.near(f"{name}, {workers} workers: host RAM after {epochs} epochs",
                            p["host_ram_bytes"], got["epochs"][-1]["pss_bytes"])
            predicted[(name, workers)] = p["host_ram_first_epoch_bytes"]
            measured[(name, workers)] = first
    for workers in (2, 4):
        saved_p = predicted[("labels", workers)] - predicted[("labels_numpy", workers)]
        saved_m = measured[("labels", workers)] - measured[("labels_numpy", workers)]
        checks.true(f"labels -> labels_numpy, {workers} workers: both show the saving",
                    saved_p > 0 and saved_m > 0 and abs(saved_p / saved_m - 1) <= TOLERANCE,
                    f"predicted {saved_p / 2**20:,.0f} MiB, measured {saved_m / 2**20:,.0f} MiB")


def check_large(trainfit, folder, checks):
    print("large: 3.7 MB samples, batches in /dev/shm", flush=True)
    batch = 16
    profile = probe("large", {}, batch, os.path.join(folder, "large.json"))
    p = plan(trainfit, profile, "--step-time", "0.5s", "--batch", str(batch),
             "--num-workers", "2", "--prefetch-factor", "3")
    # A slow consumer: every batch the workers may load ahead is in /dev/shm.
    got = real_run("large", {}, batch, 2, prefetch=3, step=0.5, seconds=6)
    checks.near("large, 2 workers x prefetch 3: /dev/shm with the batches in flight",
                p["shm_bytes"], got["shm_bytes"])
    small = plan(trainfit, profile, "--step-time", "0.5s", "--batch", str(batch),
                 "--num-workers", "2", "--prefetch-factor", "3", "--shm-size", "64MB")
    checks.true("large under Docker's 64 MB /dev/shm: warned before the run",
                any(w["code"] == "shm_small" for w in small["warnings"]))


def memory_cgroup(limit):
    """A child memory cgroup of this process's with `limit` bytes, or None where none can be
    made (no cgroup file system, or not writable)."""
    for line in open("/proc/self/cgroup").read().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            parent, limit_file = f"/sys/fs/cgroup/memory{path}", "memory.limit_in_bytes"
            break
        if hierarchy == "0" and not controllers:
            parent, limit_file = f"/sys/fs/cgroup{path}", "memory.max"
    else:
        return None
    folder = os.path.join(parent, f"trainfit-check-{os.getpid()}")
    try:
        os.mkdir(folder)
        with open(os.path.join(folder, limit_file), "w") as f:
            f.write(str(limit))
        return folder
    except OSError:
        return None


def check_seed_002(trainfit, folder, checks):
    print("seed 002: Python labels with 4 workers under a memory limit", flush=True)
    batch = 64
    objects = os.path.join(folder, "labels.json")
    fixed = os.path.join(folder, "labels_numpy.json")
    args = ("--step-time", "1ms", "--batch", str(batch), "--num-workers", "4")
    with_objects = plan(trainfit, objects, *args)["host_ram_first_epoch_bytes"]
    with_numpy = plan(trainfit, fixed, *args)["host_ram_bytes"]
    limit = (with_objects + with_numpy) // 2
    warned = plan(trainfit, objects, *args, "--memory-limit", str(limit))
    codes = [w["code"] for w in warned["warnings"]]
    checks.true(f"a limit of {limit / 2**20:,.0f} MiB: the planner warns for the Python labels",
                "cgroup_memory" in codes, ", ".join(codes))
    clean = plan(trainfit, fixed, *args, "--memory-limit", str(limit))
    checks.true("the NumPy labels under the same limit: no memory warning",
                not any(w["code"] in ("cgroup_memory", "host_ram") for w in clean["warnings"]))
    cgroup = memory_cgroup(limit)
    if cgroup is None:
        print("  (no writable memory cgroup here: the run itself is not reproduced)")
        return
    try:
        killed = real_run("labels", LABELS, batch, 4, cgroup=cgroup)
        checks.true("the Python labels under the limit: the run is killed",
                    "returncode" in killed, killed.get("stderr", "it ran to the end"))
        survived = real_run("labels_numpy", LABELS, batch, 4, cgroup=cgroup)
        checks.true("the NumPy labels under the limit: the run completes",
                    "returncode" not in survived, survived.get("stderr", ""))
    finally:
        for _ in range(50):
            try:
                os.rmdir(cgroup)
                break
            except OSError:
                time.sleep(0.1)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        ap = argparse.ArgumentParser(prog="check_loader.py run")
        ap.add_argument("run")
        ap.add_argument("--dataset", required=True)
        ap.add_argument("--kwargs", default="{}")
        ap.add_argument("--batch", type=int, required=True)
        ap.add_argument("--workers", type=int, required=True)
        ap.add_argument("--prefetch", type=int, default=2)
        ap.add_argument("--persistent", action="store_true")
        ap.add_argument("--step", type=float, default=0.0)
        ap.add_argument("--seconds", type=float, default=0.0)
        ap.add_argument("--epochs", type=int, default=1)
        return run_loader(ap.parse_args())
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--only", help="decode, labels, large or seed002")
    args = ap.parse_args()
    checks = Checks()
    signal.alarm(1500)
    with tempfile.TemporaryDirectory(prefix="trainfit-check-loader-") as folder:
        steps = {"decode": check_decode, "labels": check_labels, "large": check_large,
                 "seed002": check_seed_002}
        for name, step in steps.items():
            if args.only and name != args.only and not (name == "seed002" and args.only == "labels"):
                continue
            step(args.trainfit, folder, checks)
    if checks.failed:
        print(f"{len(checks.failed)} checks failed: {', '.join(checks.failed)}")
        return 1
    print("every loader check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
