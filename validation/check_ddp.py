"""DistributedDataParallel on CPU: trainfit's per-rank memory against real DDP runs.

Each case starts two ranks with the gloo backend (torch.multiprocessing, 127.0.0.1), wraps the
model in DistributedDataParallel inside the measurement (its construction broadcasts and
buckets count), trains two iterations as check_peak.py does and takes each rank's peak of live
tensor bytes (harness.training_peak), and reads the bucket sizes DDP itself logs
(_get_ddp_logging_data(): bucket_sizes, and rebuilt_bucket_sizes after the rebuild before the
second forward). `trainfit estimate --device-profile cpu --gpus 2 --strategy ddp --json` must
give every rank's peak within 1% and the same bucket sizes, byte for byte.

    /usr/bin/python3 validation/check_ddp.py --trainfit build/dev/trainfit
"""
import argparse
import json
import os
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_models
from harness import LiveBytes, Measured, Report, run_trainfit, training_peak

TOLERANCE = 0.01
WORLD = 2
TIMEOUT_S = 600  # per case: two ranks that wait on each other must not hang the test

# (model, batch per rank, CxHxW, optimizer): a small input keeps two ranks on two cores quick;
# the buckets are the parameters' and do not depend on it.
MODELS = [
    ("resnet18", 2, (3, 64, 64), "adamw"),
    ("vgg11_bn", 2, (3, 64, 64), "sgd"),
    ("vit_b_16", 2, (3, 64, 64), "sgd"),
]
# DDP's arguments, and the trainfit flags that say the same.
VARIANTS = [
    ({}, []),
    ({"gradient_as_bucket_view": True}, ["--gradient-as-bucket-view"]),
    ({"find_unused_parameters": True}, ["--find-unused-parameters"]),
]
# DDP with torch.distributed.optim.ZeroRedundancyOptimizer (--strategy zero1): the optimizer
# state is sharded, so the ranks differ; trainfit's figures are rank 0's.
ZERO_MODELS = [
    ("resnet18", 2, (3, 64, 64), "adamw"),
    ("vit_b_16", 2, (3, 64, 64), "adamw"),
]
ZERO_OPTIMIZERS = {"adamw": (torch.optim.AdamW, {"lr": 1e-3})}


def sizes(text):
    return [int(x) for x in str(text or "").replace(" ", "").split(",") if x]


def rank_main(rank, port, name, batch, image, optimizer, kwargs, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    case = torch_models.build(name, batch=batch, image=image)
    kwargs = dict(kwargs)
    construction = 0
    if kwargs.pop("zero", False):
        # Made before training_peak starts counting: a mode around it shows it allocates
        # nothing (checked below), so nothing is missed.
        from torch.distributed.optim import ZeroRedundancyOptimizer
        optimizer_class, defaults = ZERO_OPTIMIZERS[optimizer]
        probe = LiveBytes()
        with probe:
            zero = ZeroRedundancyOptimizer([p for p in case.model.parameters() if p.requires_grad],
                                           optimizer_class=optimizer_class, **defaults)
        construction = probe.ops
        case.preset_optimizer = lambda: zero
        optimizer = "preset"

    def make_batch():
        return [torch.randn(batch, *image)], [torch.randint(0, 1000, (batch,))]

    def wrap(model):
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=None, **kwargs)

    peak, where = training_peak(case, optimizer, make_batch, wrap=wrap)
    ddp = case.wrapped
    ddp.logger.set_runtime_stats_and_log()  # the rebuilt sizes are logged at the next forward
    data = ddp._get_ddp_logging_data()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"peak": peak, "where": list(where), "buckets": sizes(data.get("bucket_sizes")),
                   "rebuilt": sizes(data.get("rebuilt_bucket_sizes")),
                   "construction_ops": construction}, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(rank_main, *args):
    """Runs rank_main(rank, port, *args, out) on WORLD processes; each writes out/rankN.json.
    The ranks' JSON in rank order, or None when they did not finish in TIMEOUT_S."""
    with tempfile.TemporaryDirectory() as out:
        ranks = mp.spawn(rank_main, args=(free_port(), *args, out), nprocs=WORLD, join=False)
        deadline = time.monotonic() + TIMEOUT_S
        while not ranks.join(timeout=5):
            if time.monotonic() > deadline:
                for p in ranks.processes:
                    p.kill()
                return None
        result = []
        for r in range(WORLD):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                result.append(json.load(f))
    return result


# (samples, GPUs, per-GPU batch): the epoch DistributedSampler and DataLoader make on each rank.
SAMPLER_CASES = [(10, 4, 2), (1000, 2, 32), (1001, 8, 16), (50000, 3, 7)]


def sampler_checks(report, binary):
    """trainfit's samples per rank, padding and optimizer steps per epoch against
    DistributedSampler and a DataLoader over it, on every rank (no process group needed)."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    for samples, gpus, batch in SAMPLER_CASES:
        ours = run_trainfit(binary, ["estimate", "--model", "resnet18", "--batch", str(batch),
                                     "--gpus", str(gpus), "--dataset-size", str(samples),
                                     "--device-profile", "cpu", "--json"])["scaling"]
        per_rank, steps = set(), set()
        for rank in range(gpus):
            sampler = DistributedSampler(range(samples), num_replicas=gpus, rank=rank)
            per_rank.add(len(sampler))
            steps.add(len(DataLoader(range(samples), batch_size=batch, sampler=sampler)))
        padded = gpus * max(per_rank) - samples
        got = (ours["sampler"]["samples_per_rank"], ours["sampler"]["padded_samples"],
               ours["steps_per_epoch"])
        report.check(len(per_rank) == 1 and len(steps) == 1 and got == (max(per_rank), padded, max(steps)),
                     f"DistributedSampler {samples} samples, {gpus} GPUs, batch {batch}: torch "
                     f"{sorted(per_rank)} per rank, {padded} padded, {sorted(steps)} steps; "
                     f"trainfit {got[0]}, {got[1]}, {got[2]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--remeasure", action="store_true", help="measure every case, keeping none")
    args = ap.parse_args()
    report = Report(f"DDP, {WORLD} ranks (gloo): trainfit estimate --device-profile cpu --gpus "
                    f"{WORLD} vs PyTorch {torch.__version__} (CPU)")
    measured_ranks = Measured("ddp", __file__, args.remeasure)
    cases = [(m, kwargs, flags) for m in MODELS for kwargs, flags in VARIANTS]
    cases += [(m, {"zero": True}, ["--strategy", "zero1"]) for m in ZERO_MODELS]
    for (name, batch, image, optimizer), kwargs, flags in cases:
        zero = kwargs.get("zero", False)
        ranks = measured_ranks.get([name, batch, image, optimizer, kwargs],
                                   lambda: spawn_ranks(rank_main, name, batch, image, optimizer,
                                                       kwargs))
        label = f"{name} b{batch} {optimizer} {' '.join(flags) or 'defaults'}"
        if ranks is None:
            report.check(False, f"{label}: the ranks did not finish in {TIMEOUT_S} s")
            continue
        ours = run_trainfit(args.trainfit, [
            "estimate", "--model", name, "--batch", str(batch), "--input",
            "x".join(map(str, image)), "--optimizer", optimizer, "--device-profile", "cpu",
            "--gpus", str(WORLD), "--json"] + (flags if zero else ["--strategy", "ddp"] + flags))
        predicted = ours["peak_allocated_bytes"]
        for r, got in enumerate(ranks):
            error = (predicted - got["peak"]) / got["peak"]
            line = (f"{label:60s} rank {r}: torch {got['peak']:>12,} ({got['where'][0]} "
                    f"{got['where'][1]}) trainfit {predicted:>12,} "
                    f"({ours['peak_phase']} {ours['peak_iteration']}) {error:+.3%}")
            if zero and r > 0:
                report.show(line + " (trainfit's figures are rank 0's)")
            else:
                report.check(abs(error) <= TOLERANCE, line)
        if zero:
            report.check(all(got["construction_ops"] == 0 for got in ranks),
                         f"{label:60s} ZeroRedundancyOptimizer() ran "
                         f"{[got['construction_ops'] for got in ranks]} aten ops (none expected)")
        ddp = ours.get("ddp", {})
        torch_buckets, torch_rebuilt = ranks[0]["buckets"], ranks[0]["rebuilt"]
        report.check(ddp.get("bucket_bytes") == torch_buckets,
                     f"{label:60s} buckets: torch {torch_buckets} trainfit "
                     f"{ddp.get('bucket_bytes')}")
        report.check(ddp.get("rebuilt_bucket_bytes") == torch_rebuilt,
                     f"{label:60s} rebuilt: torch {torch_rebuilt} trainfit "
                     f"{ddp.get('rebuilt_bucket_bytes')}")
    sampler_checks(report, args.trainfit)
    measured_ranks.save(report)
    report.finish()


if __name__ == "__main__":
    sys.exit(main())
