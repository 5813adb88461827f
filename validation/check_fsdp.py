"""FullyShardedDataParallel on CPU: trainfit's per-rank memory against real FSDP runs.

torch 1.13's FSDP is written for CUDA: it asks for the current CUDA device, creates CUDA
streams and events, calls record_stream, and gathers and scatters with all_gather_into_tensor
and reduce_scatter_tensor, which gloo lacks. Each rank here runs FSDP's own code on CPU with
those pieces replaced by what they amount to on one stream: streams, events and record_stream
do nothing; the all-gather writes each rank's shard into the views of FSDP's output tensor
(dist.all_gather into output.chunk(world)); the reduce-scatter all-reduces FSDP's padded input
in place and copies this rank's chunk into FSDP's output. Neither allocates a tensor: every
allocation counted is FSDP's or the model's. (Python 3.11 also refuses one dataclass default in
torch.distributed._shard, which FSDP imports; it is given as a default factory.)

FSDP frees and regathers its full parameters by resizing a storage in place, so live bytes
are summed from each storage's current size (a weak reference to the storage, read after every
op), not from its size when first seen.

Each case trains two iterations on two ranks (gloo, 127.0.0.1) with the model wrapped inside
the measurement, and `trainfit estimate --device-profile cpu --gpus 2 --strategy fsdp` must
give every rank's peak within 1%.

    /usr/bin/python3 validation/check_fsdp.py --trainfit build/dev/trainfit
"""
import argparse
import contextlib
import dataclasses
import functools
import json
import os
import sys

import torch
import torch.distributed as dist

import torch_models
from check_ddp import WORLD, TIMEOUT_S, spawn_ranks
from harness import Measured, Report, make_optimizer, module_matches, run_trainfit
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode_temporarily
from torch.utils._pytree import tree_flatten
from torch.multiprocessing.reductions import StorageWeakRef

TOLERANCE = 0.01

# (model, batch per rank, CxHxW, optimizer, wrap patterns): the units FSDP flattens; none is
# FSDP's default (the whole model one unit).
MODELS = [
    ("resnet18", 2, (3, 64, 64), "adamw", ["layer1", "layer2", "layer3", "layer4"]),
    ("vgg11_bn", 2, (3, 64, 64), "sgd", []),
    ("vit_b_16", 2, (3, 64, 64), "adamw", ["encoder.layers.*"]),
]
SHARDING = ["full_shard", "shard_grad_op"]
# Each (model, sharding) in fp32, and these models also under MixedPrecision in bf16 (1.13 wraps
# every BatchNorm as its own full-precision unit then, which trainfit refuses).
MIXED = ["vit_b_16"]


def import_fsdp():
    """FSDP's module, importable and runnable on CPU (see the module's docstring)."""
    get_field = dataclasses._get_field

    def lenient(cls, name, type_, kw_only):
        try:
            return get_field(cls, name, type_, kw_only)
        except ValueError:
            default = getattr(cls, name)
            setattr(cls, name, dataclasses.field(default_factory=lambda: default))
            return get_field(cls, name, type_, kw_only)

    dataclasses._get_field = lenient
    try:
        import torch.distributed.fsdp.fully_sharded_data_parallel as fsdp
    finally:
        dataclasses._get_field = get_field

    class Stream:
        def wait_stream(self, stream):
            pass

        def wait_event(self, event):
            pass

        def synchronize(self):
            pass

    class Event:
        def record(self, stream=None):
            pass

        def synchronize(self):
            pass

        def query(self):
            return True

    torch.cuda.Stream, torch.cuda.Event = Stream, Event
    torch.cuda.current_stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda stream: contextlib.nullcontext()
    torch.cuda.is_available = lambda: True
    torch.cuda.synchronize = lambda *a, **k: None
    torch.Tensor.record_stream = lambda self, stream: None
    fsdp.FullyShardedDataParallel._get_compute_device = lambda self, *a, **k: torch.device("cpu")

    # gloo has no 16-bit floats: under MixedPrecision the collectives run on float32 copies made
    # with the measurement suspended (NCCL needs none), and write FSDP's tensors in place.
    def wide(t):
        return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t

    def all_gather_base(output, input, group=None, async_op=False):
        with _pop_mode_temporarily():
            world = dist.get_world_size(group)
            chunks = [wide(c) for c in output.chunk(world)]
            dist.all_gather(chunks, wide(input), group=group)
            for c, out in zip(chunks, output.chunk(world)):
                if c.data_ptr() != out.data_ptr():
                    out.copy_(c)

    def reduce_scatter_base(output, input, group=None, async_op=False):
        with _pop_mode_temporarily():
            total = wide(input)
            dist.all_reduce(total, group=group)
            output.copy_(total.chunk(dist.get_world_size(group))[dist.get_rank(group)])

    dist._all_gather_base = all_gather_base
    dist._reduce_scatter_base = reduce_scatter_base
    return fsdp


class StorageBytes(TorchDispatchMode):
    """Peak of live tensor bytes, each storage counted at its current size after every op; and
    the peak of each phase."""

    def __init__(self):
        super().__init__()
        self.refs = {}
        self.phase = "setup"
        self.iteration = 0
        self.peak = 0
        self.peak_at = None
        self.phase_peak = {}

    def track(self, t):
        if not isinstance(t, torch.Tensor) or t.is_meta:
            return
        s = t.storage().untyped()
        ref = self.refs.get(s._cdata)
        if ref is None or ref.expired():
            self.refs[s._cdata] = StorageWeakRef(s)

    def live(self):
        total = 0
        for key, ref in list(self.refs.items()):
            if ref.expired():
                del self.refs[key]
            else:
                total += torch.UntypedStorage._new_with_weak_ptr(ref.cdata).nbytes()
        return total

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten((out, args, kwargs))[0]:
            self.track(t)
        live = self.live()
        self.phase_peak[self.phase] = max(self.phase_peak.get(self.phase, 0), live)
        if live > self.peak:
            self.peak = live
            self.peak_at = (self.phase, self.iteration, str(func))
        return out


def fsdp_training(model, units, optimizer, make_batch, loss_fn, sharding="full_shard",
                  mixed=False):
    """Wraps `model` in FSDP (each module of `units` its own unit) inside a StorageBytes count
    and trains two iterations as check_peak.py does; returns the count. The process group is
    the caller's."""
    fsdp = import_fsdp()
    mode = StorageBytes()
    for t in list(model.parameters()) + list(model.buffers()):
        mode.track(t)
    # The loop's last tensor (ViT's head bias: it has no buffers) would otherwise stay alive
    # through the run, 4,000 bytes that no training script holds.
    del t
    with mode:
        model = fsdp.FullyShardedDataParallel(
            model, auto_wrap_policy=functools.partial(
                lambda module, recurse, unwrapped_params: recurse or module in units),
            sharding_strategy=getattr(fsdp.ShardingStrategy, sharding.upper()),
            mixed_precision=fsdp.MixedPrecision(param_dtype=torch.bfloat16,
                                                reduce_dtype=torch.bfloat16,
                                                buffer_dtype=torch.bfloat16) if mixed else None)
        opt = make_optimizer(optimizer, model.parameters())
        for it in range(2):
            mode.iteration = it + 1
            mode.phase = "forward"
            inputs, targets = make_batch()
            out = model(*inputs)
            loss = loss_fn(out, *targets)
            mode.phase = "backward"
            loss.backward()
            mode.phase = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)
            del inputs, targets, out, loss
    return mode


def join_gloo(rank, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)


def finish_rank(rank, out, result):
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


def rank_main(rank, port, name, batch, image, optimizer, wrap, sharding, mixed, out):
    join_gloo(rank, port)
    case = torch_models.build(name, batch=batch, image=image)
    units = {m for path, m in case.model.named_modules()
             if any(module_matches(path, p) for p in wrap)}
    mode = fsdp_training(
        case.model, units, optimizer,
        lambda: ([torch.randn(batch, *image)], [torch.randint(0, 1000, (batch,))]),
        case.loss_fn, sharding, mixed)
    finish_rank(rank, out, {"peak": mode.peak, "where": list(mode.peak_at)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--remeasure", action="store_true", help="measure every case, keeping none")
    args = ap.parse_args()
    report = Report(f"FSDP, {WORLD} ranks (gloo): trainfit estimate --device-profile cpu --gpus "
                    f"{WORLD} --strategy fsdp vs PyTorch {torch.__version__} (CPU)")
    measured = Measured("fsdp", __file__, args.remeasure)
    cases = [(m, sharding, mixed) for m in MODELS for mixed in (False, True)
             for sharding in SHARDING if not mixed or m[0] in MIXED]
    for (name, batch, image, optimizer, wrap), sharding, mixed in cases:
        # WORLD is check_ddp's, outside this file's digest: it keys the case.
        ranks = measured.get([name, batch, image, optimizer, wrap, sharding, mixed, WORLD],
                             lambda: spawn_ranks(rank_main, name, batch, image, optimizer,
                                                 wrap, sharding, mixed))
        label = (f"{name} b{batch} {optimizer} {sharding}{' bf16' if mixed else ''} wrap "
                 f"{','.join(wrap) or '(root)'}")
        if ranks is None:
            report.check(False, f"{label}: the ranks did not finish in {TIMEOUT_S} s")
            continue
        flags = ["--fsdp-sharding", sharding] + (["--fsdp-wrap", ",".join(wrap)] if wrap else [])
        flags += ["--fsdp-mixed-precision", "bf16"] if mixed else []
        ours = run_trainfit(args.trainfit, [
            "estimate", "--model", name, "--batch", str(batch), "--input",
            "x".join(map(str, image)), "--optimizer", optimizer, "--device-profile", "cpu",
            "--gpus", str(WORLD), "--strategy", "fsdp", "--json"] + flags)
        predicted = ours["peak_allocated_bytes"]
        for r, got in enumerate(ranks):
            error = (predicted - got["peak"]) / got["peak"]
            report.check(abs(error) <= TOLERANCE,
                         f"{label:62s} rank {r}: torch {got['peak']:>12,} ({got['where'][0]} "
                         f"{got['where'][1]}) trainfit {predicted:>12,} "
                         f"({ours['peak_phase']} {ours['peak_iteration']}) {error:+.3%}")
    measured.save(report)
    report.finish()


if __name__ == "__main__":
    sys.exit(main())
