"""A check around the first training step of a script: trainfit predicts the step's peak
memory before it runs and, on a CUDA GPU, compares it with what PyTorch measured after it.

    for step, (x, y) in enumerate(loader):
        with trainfit.check(model, optimizer, gpu="rtx4090", enabled=step == 0):
            loss = F.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

When the model's first forward inside the block starts, the check takes the shapes and dtypes
of its inputs, traces a CPU copy of the model at batch 2 and 3 with the optimizer's class and
settings (nothing is written, the model is not changed), and prints the predicted peak of this
first step (and of the steps after it, which hold the optimizer's state). After the block, on
CUDA, it prints torch.cuda.max_memory_allocated() and max_memory_reserved() beside them.
The trace runs the model as it is, in fp32 without autocast: it predicts an fp32 step.
"""
from __future__ import annotations

import copy
import csv
import io
import sys
from types import TracebackType
from typing import Any, Callable, Dict, Optional, TextIO, Type

import torch

from .api import Error, Report, _estimate_with_timeline
from .live import LossFn, batch_size, trace_module


def _gib(n: float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n / 2**30:.2f} GiB"


def _first_step_peaks(timeline: str) -> Dict[str, int]:
    """The peaks of allocated and reserved bytes in the first iteration of a timeline CSV."""
    rows = list(csv.DictReader(io.StringIO(timeline)))
    if not rows:
        return {"allocated": 0, "reserved": 0}
    first = min(int(r["iteration"]) for r in rows)
    step = [r for r in rows if int(r["iteration"]) == first]
    return {"allocated": max(int(r["allocated_bytes"]) for r in step),
            "reserved": max(int(r["reserved_bytes"]) for r in step)}


class Check:
    """The context manager trainfit.check returns. After the block: `report` (the estimate's
    dict), `predicted` ({"allocated", "reserved"} bytes of the first step) and, on CUDA,
    `measured` (the same from torch.cuda)."""

    def __init__(self, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer],
                 loss_fn: Optional[LossFn], enabled: bool, out: TextIO, options: Dict[str, Any]):
        """Checks the arguments; the work starts when the block is entered."""
        if not isinstance(model, torch.nn.Module):
            raise Error(f"model is a {type(model).__name__}, not a torch.nn.Module (hint: "
                        "trainfit.check(model, optimizer, gpu=...))")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise Error(f"optimizer is a {type(optimizer).__name__}, not a torch.optim "
                        "optimizer (hint: pass the optimizer the script steps, or None for AdamW)")
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.enabled = enabled
        self.out = out
        self.options = options
        self.report: Optional[Report] = None
        self.predicted: Optional[Dict[str, int]] = None
        self.measured: Optional[Dict[str, int]] = None
        self._handle: Optional[torch.utils.hooks.RemovableHandle] = None
        self._cuda = False

    def __enter__(self) -> "Check":
        """Hooks the model's next forward."""
        if self.enabled:
            self._handle = self.model.register_forward_pre_hook(self._before_forward)
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        """On CUDA, reads PyTorch's peaks and prints them beside the prediction."""
        self._remove_hook()
        if not self.enabled or kind is not None or self.predicted is None:
            return
        if not self._cuda:
            self._print("the model is not on a CUDA GPU: nothing measured to compare")
            return
        torch.cuda.synchronize()
        self.measured = {"allocated": int(torch.cuda.max_memory_allocated()),
                         "reserved": int(torch.cuda.max_memory_reserved())}
        for key in ("allocated", "reserved"):
            predicted, measured = self.predicted[key], self.measured[key]
            error = (predicted - measured) / measured if measured else 0.0
            self._print(f"peak {key}: predicted {_gib(predicted)}, measured {_gib(measured)} "
                        f"(torch.cuda.max_memory_{key}), {error:+.1%}")

    def _remove_hook(self) -> None:
        """Removes the forward pre-hook, once."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _print(self, line: str) -> None:
        """One line on the check's stream."""
        print(f"trainfit.check: {line}", file=self.out, flush=True)

    def _make_optimizer(self) -> Callable[[Any], torch.optim.Optimizer]:
        """Makes an optimizer of the script's class and defaults (AdamW when none was given)."""
        if self.optimizer is None:
            return lambda params: torch.optim.AdamW(params, lr=1e-3)
        kind, defaults = type(self.optimizer), dict(self.optimizer.defaults)
        return lambda params: kind(params, **defaults)

    def _before_forward(self, module: torch.nn.Module, inputs: Any) -> None:
        """At the first forward, with its inputs: traces a CPU copy, predicts, prints, and
        resets CUDA's peaks."""
        self._remove_hook()  # the first forward only; tracing calls the model again
        example = inputs[0] if len(inputs) == 1 else tuple(inputs)
        device = next((p.device for p in self.model.parameters()), torch.device("cpu"))
        self._cuda = device.type == "cuda"
        batch = batch_size(example)
        on_cpu = _to_cpu(example)
        model = copy.deepcopy(self.model).cpu() if self._cuda else self.model
        traced = trace_module(model, on_cpu, loss_fn=self.loss_fn,
                              optimizer=self._make_optimizer())
        del model
        options = dict(self.options)
        options.setdefault("device_profile", "cuda" if self._cuda else "cpu")
        self.report, timeline = _estimate_with_timeline(trace=traced, batch=batch, **options)
        self.predicted = _first_step_peaks(timeline)
        where = f" on {self.report['gpu']['name']}" if self.report.get("gpu") else ""
        fits = self.report.get("fits")
        verdict = "" if fits is None else (": fits" if fits else ": does not fit")
        if fits and self.report.get("fits_upper") is False:
            verdict = ": fits, but not with its unmeasured cuDNN workspaces at their bound"
        upper = self.report.get("peak_reserved_upper_bytes", 0)
        bound = (f" (up to {_gib(upper)} with unmeasured cuDNN workspaces)"
                 if upper > self.report["peak_reserved_bytes"] else "")
        self._print(f"batch {batch}{where}: first step peak allocated "
                    f"{_gib(self.predicted['allocated'])}, reserved "
                    f"{_gib(self.predicted['reserved'])}; later steps "
                    f"{_gib(self.report['peak_allocated_bytes'])} allocated, "
                    f"{_gib(self.report['peak_reserved_bytes'])} reserved{bound}{verdict}")
        if self._cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()


def _to_cpu(batch: Any) -> Any:
    """The batch with every tensor detached and copied to the CPU."""
    if isinstance(batch, torch.Tensor):
        return batch.detach().cpu()
    if isinstance(batch, tuple):
        return tuple(_to_cpu(b) for b in batch)
    if isinstance(batch, list):
        return [_to_cpu(b) for b in batch]
    if isinstance(batch, dict):
        return {k: _to_cpu(v) for k, v in batch.items()}
    return batch


def check(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None, *,
          loss_fn: Optional[LossFn] = None, enabled: bool = True, out: TextIO = sys.stderr,
          **options: Any) -> Check:
    """A context manager around a training step: predicts its peak memory when the model's
    first forward in the block starts, and on CUDA compares with torch.cuda's peaks after it.

    optimizer: the one the script steps (its class and defaults are traced; None: AdamW).
    loss_fn(output, inputs): when the default cross-entropy on random classes does not fit the
    model's output. enabled=False makes it do nothing (for steps after the first). Other
    keywords go to trainfit.estimate: gpu="rtx4090", precision, margin, ...
    """
    return Check(model, optimizer, loss_fn, enabled, out, options)
