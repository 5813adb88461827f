"""Timings of the Python binding, in process: the figures the README's Performance section gives.

    PYTHONPATH=python /usr/bin/python3 bench/binding_bench.py    # after scripts/setup.sh

Traces resnet50 (3x224x224, AdamW) at batch 1, 2 and 3, then times, each as the median of
several calls: trainfit.estimate of the zoo's resnet50 at batch 256; trainfit.load_trace of the
file (read, parsed and fitted); trainfit.estimate of the loaded trace at batch 256;
trainfit.fit of it for one GPU; and `trainfit estimate --trace` from the shell, which reads and
fits the file on every call.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torchvision

import trainfit

RELEASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "release")


def median_ms(call, n):
    call()  # warm: the first call loads the binding (and fits a trace)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main():
    binary = os.path.join(os.environ.get("TRAINFIT_BUILD", RELEASE), "trainfit")
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "resnet50.trace.json")
        torch.manual_seed(0)
        traced = trainfit.trace(
            torchvision.models.resnet50(),
            lambda n: (torch.randn(n, 3, 224, 224), torch.randint(0, 1000, (n,))),
            torch.nn.functional.cross_entropy, lambda p: torch.optim.AdamW(p),
            batch_sizes=(1, 2, 3), out=path, name="resnet50")
        events = sum(len(r["events"]) for r in traced["runs"])
        size = os.path.getsize(path) / 2**20
        loaded = trainfit.load_trace(path)
        rows = [
            ("trainfit.estimate('resnet50', batch=256)",
             median_ms(lambda: trainfit.estimate("resnet50", batch=256, gpu="rtx4090"), 40)),
            (f"trainfit.load_trace(...) ({events} events, {size:.1f} MiB)",
             median_ms(lambda: trainfit.load_trace(path), 10)),
            ("trainfit.estimate(trace=loaded, batch=256)",
             median_ms(lambda: trainfit.estimate(trace=loaded, batch=256, gpu="rtx4090"), 40)),
            ("trainfit.fit(trace=loaded, gpu='rtx4090')",
             median_ms(lambda: trainfit.fit(trace=loaded, gpu="rtx4090"), 10)),
            (f"trainfit estimate --trace ({size:.1f} MiB) from the shell",
             median_ms(lambda: subprocess.run(
                 [binary, "estimate", "--trace", path, "--batch", "256", "--gpu", "rtx4090"],
                 check=True, capture_output=True), 10)),
        ]
    for what, ms in rows:
        print(f"{what:60s} {ms:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
