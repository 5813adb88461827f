"""trainfit's Python side: trace a real PyTorch model's training step for trainfit.

    import trainfit
    trainfit.trace(model, make_batch, loss_fn, make_optimizer, out="model.trace.json")
    # then: trainfit estimate --trace model.trace.json --batch 64 --gpu rtx4090
"""
from .tracer import FORMAT, VERSION, trace  # noqa: F401

__all__ = ["trace", "FORMAT", "VERSION"]
