"""trainfit's Python side: trace a real PyTorch model's training step for trainfit.

    import trainfit
    trainfit.trace(model, make_batch, loss_fn, make_optimizer, out="model.trace.json")
    # then: trainfit estimate --trace model.trace.json --batch 64 --gpu rtx4090
    # or, in process (needs the build): trainfit.estimate(trace="model.trace.json", batch=64)
"""
from .api import Error, estimate, fit  # noqa: F401

__all__ = ["trace", "estimate", "fit", "Error", "FORMAT", "VERSION"]


def __getattr__(name):
    # The tracer imports torch; estimate and fit do not need it.
    if name in ("trace", "FORMAT", "VERSION"):
        from . import tracer
        return getattr(tracer, name)
    raise AttributeError(f"module 'trainfit' has no attribute '{name}'")
