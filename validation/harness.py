"""Measurements on real PyTorch (CPU) that trainfit's numbers are checked against.

    from harness import saved_tensor_bytes, run_trainfit
    measured = saved_tensor_bytes(model, lambda: loss_fn(model(x), y), exclude=[x, y])
    predicted = run_trainfit(binary, ["summary", "--model", "resnet18", "--device-profile", "cpu",
                                      "--json"])["activation_bytes"]

"Kept for backward" is the sum of the unique storages that autograd's saved-tensor hooks see
during the forward pass (model and loss), excluding the model's parameters and buffers and the
batch tensors. A view keeps its whole storage, so storages, not tensors, are the unit.
"""
import json
import subprocess
import sys

import torch


def storage_of(t):
    """(data_ptr, nbytes) of a tensor's whole storage, on PyTorch 1.13 and 2.x."""
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()


def saved_tensor_bytes(model, forward, exclude=(), details=False):
    """Runs forward() under saved_tensors_hooks; returns the bytes of unique storages kept.

    With details=True also returns a list of (ptr, nbytes, shape, dtype) per kept storage.
    """
    excluded = {storage_of(p)[0] for p in list(model.parameters()) + list(model.buffers())}
    excluded |= {storage_of(t)[0] for t in exclude}
    kept = {}

    def pack(t):
        ptr, nbytes = storage_of(t)
        if ptr not in excluded and nbytes > kept.get(ptr, (0,))[0]:
            kept[ptr] = (nbytes, tuple(t.shape), str(t.dtype).replace("torch.", ""))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    total = sum(v[0] for v in kept.values())
    del out
    if details:
        return total, [(p, *v) for p, v in kept.items()]
    return total


def parameter_counts(model):
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    return total, trainable


def run_trainfit(binary, args):
    """Runs the trainfit binary and parses its JSON output."""
    proc = subprocess.run([binary] + args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"trainfit {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return json.loads(proc.stdout)


class Report:
    """Collects pass/fail lines and exits non-zero if anything failed."""

    def __init__(self, title):
        self.title = title
        self.failures = 0
        self.checks = 0
        print(title, flush=True)

    def check(self, ok, line):
        self.checks += 1
        if not ok:
            self.failures += 1
        print(f"  {'ok  ' if ok else 'FAIL'} {line}", flush=True)

    def finish(self):
        print(f"{self.title}: {self.checks - self.failures}/{self.checks} passed", flush=True)
        sys.exit(1 if self.failures or not self.checks else 0)
