"""trainfit's Python side: estimate a training step's GPU memory in process, and trace a real
PyTorch model's training step for trainfit.

    import trainfit
    trainfit.estimate("resnet50", batch=64, gpu="rtx4090")["peak_reserved_bytes"]
    trainfit.estimate(model, torch.randn(2, 3, 224, 224), batch=64, gpu="rtx4090")  # nn.Module
    trace = trainfit.trace(model, make_batch, loss_fn, make_optimizer)   # needs torch
    trainfit.fit(trace=trainfit.load_trace(trace), gpu="all")
"""
from .api import Error, Trace, compare, estimate, fit, launch, load_trace, summary

__all__ = ["trace", "estimate", "fit", "launch", "compare", "summary", "load_trace", "Trace",
           "Error", "FORMAT", "VERSION"]


def __getattr__(name: str) -> object:
    # The tracer imports torch; the estimates do not need it.
    if name in ("trace", "FORMAT", "VERSION"):
        from . import tracer
        return getattr(tracer, name)
    raise AttributeError(f"module 'trainfit' has no attribute '{name}'")
