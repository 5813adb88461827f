"""trainfit's Python side: estimate a training step's GPU memory in process, and trace a real
PyTorch model's training step for trainfit.

    import trainfit
    trainfit.estimate("resnet50", batch=64, gpu="rtx4090")["peak_reserved_bytes"]
    trainfit.estimate(model, torch.randn(2, 3, 224, 224), batch=64, gpu="rtx4090")  # nn.Module
    trace = trainfit.trace(model, make_batch, loss_fn, make_optimizer)   # needs torch
    trainfit.fit(trace=trainfit.load_trace(trace), gpu="all")
    with trainfit.check(model, optimizer, gpu="rtx4090"):  # around a script's first step
        ...
"""
from .api import Error, Trace, compare, estimate, fit, launch, load_trace, summary

__all__ = ["trace", "check", "estimate", "fit", "launch", "compare", "summary", "load_trace",
           "Trace",
           "Error", "FORMAT", "VERSION"]


def __getattr__(name: str) -> object:
    """The tracer and the check hook, imported on first use: they need torch, which the
    estimates do not."""
    if name in ("trace", "FORMAT", "VERSION"):
        from . import tracer
        return getattr(tracer, name)
    if name == "check":
        from .hook import check
        return check
    raise AttributeError(f"module 'trainfit' has no attribute '{name}'")
