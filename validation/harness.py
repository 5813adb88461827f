"""Measurements on real PyTorch (CPU) that trainfit's numbers are checked against.

    from harness import saved_tensor_bytes, run_trainfit
    measured = saved_tensor_bytes(model, lambda: loss_fn(model(x), y), exclude=[x, y])
    predicted = run_trainfit(binary, ["summary", "--model", "resnet18", "--device-profile", "cpu",
                                      "--json"])["activation_bytes"]

"Kept for backward" is the sum of the unique storages that autograd's saved-tensor hooks see
during the forward pass (model and loss), excluding the model's parameters and buffers and the
batch tensors. A view keeps its whole storage, so storages, not tensors, are the unit.
"""
import hashlib
import json
import os
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


def freeze(model, prefixes):
    """requires_grad_(False) below each prefix, as `trainfit --freeze PREFIX` models it."""
    for name, p in model.named_parameters():
        if any(name == q or name.startswith(q + ".") for q in prefixes):
            p.requires_grad_(False)


def set_flags(sets):
    """{"cameras": "96x96"} -> ["--set", "cameras=96x96"]"""
    return [f for k, v in sets.items() for f in ("--set", f"{k}={v}")]


def sets_label(sets):
    return " ".join(f"{k}={v}" for k, v in sets.items())


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

    def show(self, line):
        """A figure printed for information: it counts neither as passed nor as failed."""
        print(f"  info {line}", flush=True)

    def finish(self):
        print(f"{self.title}: {self.checks - self.failures}/{self.checks} passed", flush=True)
        sys.exit(1 if self.failures or not self.checks else 0)


# ---- PyTorch's figures, kept between runs ---------------------------------------------------

MEASURED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "measured")
# The sources that decide what PyTorch measures: the training loops, the model re-creations.
MEASURED_SOURCES = ("harness.py", "torch_models.py", "lerobot_reference.py", "gpt2_reference.py")


class Measured:
    """PyTorch's figures for a check, kept in validation/measured/NAME.json so that a run
    re-measures only what changed. The file holds one digest of PyTorch's version and the
    sources that decide the figures (MEASURED_SOURCES and the check's own script); a different
    digest discards every figure. A case is keyed by everything it is built from. Figures are
    exact byte counts, so a kept one equals a new measurement; `remeasure` ignores the file."""

    def __init__(self, name, script, remeasure=False):
        self.path = os.path.join(MEASURED_DIR, name + ".json")
        digest = hashlib.sha256(torch.__version__.encode())
        for source in MEASURED_SOURCES + (os.path.abspath(script),):
            with open(os.path.join(os.path.dirname(MEASURED_DIR), source), "rb") as f:
                digest.update(f.read())
        self.digest = digest.hexdigest()
        self.figures = {}
        self.kept = self.measured = 0
        if not remeasure:
            try:
                with open(self.path) as f:
                    data = json.load(f)
                if data.get("digest") == self.digest:
                    self.figures = data["figures"]
            except (OSError, ValueError, KeyError, AttributeError):
                pass  # no file, or one not ours: everything is measured
        self.used = {}

    def get(self, key, measure):
        """The figure for `key` (a list of the case's inputs), measured by measure() when not
        kept; it must be JSON (numbers, strings, lists). None (no measurement) is not kept."""
        key = json.dumps(key)
        if key in self.figures:
            self.kept += 1
            value = self.figures[key]
        else:
            value = measure()
            if value is None:
                return None
            self.measured += 1
            value = json.loads(json.dumps(value))
        self.used[key] = value
        return value

    def save(self, report):
        """Writes the figures when any was measured (with those kept), and says how many were kept."""
        report.show(f"PyTorch figures: {self.measured} measured, {self.kept} kept in "
                    f"{os.path.relpath(self.path)} (remeasure with --remeasure)")
        if self.measured:
            os.makedirs(MEASURED_DIR, exist_ok=True)
            with open(self.path, "w") as f:
                json.dump({"torch": torch.__version__, "digest": self.digest,
                           "figures": {**self.figures, **self.used}}, f, indent=1, sort_keys=True)
                f.write("\n")


# ---- peak of live tensor bytes over training iterations -------------------------------------

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

try:
    from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
except ImportError:  # pragma: no cover
    StorageWeakRef = None


def _untyped(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    s = t.storage()
    return s._untyped() if hasattr(s, "_untyped") else s


class LiveBytes(TorchDispatchMode):
    """Tracks every tensor storage that aten ops produce or receive; after each op returns,
    sums the storages still alive (a weak reference to the storage itself, so tensors held
    only inside autograd count too) and keeps the peak, with the phase and op where it was.

    Summing is linear in the storages tracked, so it is skipped where it cannot find a new
    peak: live bytes after an op are at most the last sum plus the bytes tracked since, and
    while that bound is not above the peak, neither is the sum. The peak stays exact."""

    def __init__(self):
        super().__init__()
        self.refs = {}
        self.phase = "setup"
        self.iteration = 0
        self.peak = 0
        self.peak_at = None
        self.ops = 0
        self.bound = 0  # the last sum of live bytes plus every byte tracked since

    def track(self, t):
        if not isinstance(t, torch.Tensor) or t.is_meta:
            return
        s = _untyped(t)
        nbytes = s.nbytes()
        if nbytes == 0:
            return
        ptr = s.data_ptr()
        old = self.refs.get(ptr)
        if old is None or old[0].expired():
            self.refs[ptr] = (StorageWeakRef(s), nbytes)
            self.bound += nbytes

    def live(self):
        dead = [p for p, (ref, _) in self.refs.items() if ref.expired()]
        for p in dead:
            del self.refs[p]
        self.bound = sum(n for _, n in self.refs.values())
        return self.bound

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self.track(t)
        for t in tree_flatten((args, kwargs))[0]:
            self.track(t)
        self.ops += 1
        if self.bound > self.peak:
            live = self.live()
            if live > self.peak:
                self.peak = live
                self.peak_at = (self.phase, self.iteration, str(func))
        return out


def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01)
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    raise KeyError(name)


def module_matches(path, pattern):
    a, b = path.split("."), pattern.split(".")
    return len(a) == len(b) and all(q == "*" or q == p for p, q in zip(a, b))


def checkpoint_modules(model, patterns):
    """Runs each module matching a pattern (the outermost ones) under non-reentrant
    torch.utils.checkpoint, as `trainfit --checkpoint PATTERN` models it."""
    import torch.utils.checkpoint as cp
    chosen = []
    for name, module in model.named_modules():
        if any(module_matches(name, p) for p in patterns) and not any(
                name.startswith(c + ".") for c in chosen):
            chosen.append(name)
            forward = module.forward
            module.forward = (lambda f: lambda *a, **k: cp.checkpoint(f, *a, use_reentrant=False, **k))(forward)
    return chosen


def training_peak(case, optimizer, make_batch, iterations=2, wrap=None):
    """Peak of live tensor bytes over `iterations` training steps: forward and loss, backward,
    optimizer.step(), zero_grad(set_to_none=True); the batch is made fresh each step and
    released at its end, with the model output and loss. optimizer "preset" is the case's own
    recipe (LeRobot's policies: their optimizer, weight decay and parameter groups). `wrap`
    (DistributedDataParallel) is applied to the model inside the measurement, as setup."""
    model = case.model
    if optimizer == "preset":
        opt = case.preset_optimizer()
    else:
        opt = make_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad])
    mode = LiveBytes()
    for t in list(model.parameters()) + list(model.buffers()):
        mode.track(t)
    with mode:
        if wrap is not None:
            model = wrap(model)
            case.wrapped = model
        for it in range(iterations):
            mode.iteration = it + 1
            mode.phase = "forward"
            inputs, targets = make_batch()
            out = model(*inputs)
            loss = case.loss_fn(out, *targets)
            mode.phase = "backward"
            loss.backward()
            mode.phase = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)
            del inputs, targets, out, loss
    return mode.peak, mode.peak_at
