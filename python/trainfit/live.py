"""A live nn.Module estimated in one call: traced in this process on the CPU at two small
batch sizes (no files), then estimated at any batch by the library.

    import torch, torchvision, trainfit
    model = torchvision.models.convnext_tiny()
    trainfit.estimate(model, torch.randn(2, 3, 128, 128), batch=64, gpu="rtx4090")

`example_batch` is what the model is called with: a tensor, a tuple or list of tensors
(model(*batch)) or a dict (model(**batch)), each tensor with the batch as its first dimension.
The traced batches have its shapes and dtypes with random values (integers within its range). The default loss is cross-entropy against random classes of
the right shape, for a classifier's [N, C] output or a segmenter's [N, C, H, W]; any other output
needs `loss_fn(output, inputs) -> scalar`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import torch

from .api import Error
from .tracer import call_model

# Traced at 2 and 3: at batch 1 some models take another path (a copy PyTorch skips, a view
# instead of a new tensor), which would not line up with the larger batch.
TRACE_BATCHES = (2, 3)

OPTIMIZERS: Dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.01),
    "momentum": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
}

OptimizerSpec = Union[str, Callable[[Any], torch.optim.Optimizer]]
LossFn = Callable[[Any, Any], torch.Tensor]


def _leading(tensors: Sequence[torch.Tensor]) -> int:
    """The tensors' common first dimension, or an Error naming the sizes."""
    sizes = {t.shape[0] for t in tensors if t.dim() > 0}
    if len(sizes) != 1:
        raise Error(f"the example batch's tensors have first dimensions {sorted(sizes)} (hint: give "
                    "tensors that all start with the batch dimension)")
    return int(sizes.pop())


def batch_size(example_batch: Any) -> int:
    """The batch size of an example batch: its tensors' common first dimension."""
    tensors = _flatten(example_batch)
    if not tensors:
        raise Error("the example batch has no tensors (hint: pass what the model is called with, "
                    "e.g. torch.randn(2, 3, 224, 224))")
    return _leading(tensors)


def _flatten(batch: Any) -> list[torch.Tensor]:
    """Every tensor in a tensor, tuple, list or dict, in order."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, (tuple, list)):
        return [t for item in batch for t in _flatten(item)]
    if isinstance(batch, dict):
        return [t for item in batch.values() for t in _flatten(item)]
    return []


class _Template:
    """One tensor of the example batch as the traced batches need it: its shape past the batch
    dimension, its dtype, and for integers their range, for booleans and complex numbers the
    first value. Read before tracing, so that the trace never sees the example's own tensors
    (which the training step does not hold)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        """Reads what make() needs from `tensor`, which has a batch dimension."""
        self.shape = tuple(tensor.shape[1:])
        self.dtype = tensor.dtype
        self.floating = tensor.is_floating_point()
        self.range: Optional[Tuple[int, int]] = None
        self.fill: Any = None
        if self.floating:
            return
        if tensor.dtype != torch.bool and not tensor.is_complex():
            self.range = (int(tensor.min()), int(tensor.max()))
        else:
            self.fill = tensor.flatten()[0].item()

    def make(self, n: int) -> torch.Tensor:
        """A tensor of n like the example's, made by one op."""
        shape = (n, *self.shape)
        if self.floating:
            return torch.randn(shape, dtype=self.dtype)
        if self.range is not None:
            low, high = self.range
            return torch.randint(low, high + 1, shape, dtype=self.dtype)
        return torch.full(shape, self.fill, dtype=self.dtype)


def _template(batch: Any) -> Any:
    """The example batch with each tensor that has a batch dimension replaced by its
    _Template; scalars and anything else stay as they are."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.dim() == 0 else _Template(batch)
    if isinstance(batch, tuple):
        return tuple(_template(item) for item in batch)
    if isinstance(batch, list):
        return [_template(item) for item in batch]
    if isinstance(batch, dict):
        return {k: _template(v) for k, v in batch.items()}
    return batch


def _like(template: Any, n: int) -> Any:
    """A batch of n shaped and typed like the example `template` was read from (_template), each
    tensor made by one op (so that the trace sees the batch and nothing else): normal floats,
    integers within the example's range (token ids stay valid), booleans and other types filled
    with the example's first value."""
    if isinstance(template, _Template):
        return template.make(n)
    if isinstance(template, tuple):
        return tuple(_like(item, n) for item in template)
    if isinstance(template, list):
        return [_like(item, n) for item in template]
    if isinstance(template, dict):
        return {k: _like(v, n) for k, v in template.items()}
    return template


def _logits(output: Any) -> torch.Tensor:
    """The tensor the default loss applies to, or an Error saying what to pass instead."""
    if isinstance(output, torch.Tensor):
        tensor = output
    elif isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
        tensor = output[0]  # a namedtuple such as Inception's (logits, aux_logits)
    elif isinstance(output, dict):
        raise Error(f"the model returns a dict (keys {', '.join(map(str, output))}), which the "
                    "default cross-entropy cannot score (hint: pass loss_fn=lambda output, inputs: "
                    "... returning a scalar, e.g. output['out'].mean())")
    else:
        raise Error(f"the model returns a {type(output).__name__}, not a tensor (hint: pass "
                    "loss_fn=lambda output, inputs: ... returning a scalar)")
    if not tensor.is_floating_point() or tensor.dim() < 2:
        raise Error(f"the model's output has shape {list(tensor.shape)}, not [N, classes, ...] "
                    "(hint: pass loss_fn=lambda output, inputs: ... returning a scalar)")
    return tensor


def _probe(model: torch.nn.Module, inputs: Any) -> torch.Tensor:
    """One forward in training mode without gradients, buffers (BatchNorm's running statistics)
    put back afterwards: the output's shape, for the default loss's target."""
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    try:
        with torch.no_grad():
            output = call_model(model, inputs)
    except Exception as e:  # the model's own error, on the user's example batch
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise Error(f"the model failed on the example batch: {type(e).__name__}: {first} (hint: "
                    "pass an example_batch the model accepts, e.g. a larger image)") from e
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
    return _logits(output)


def _optimizer(spec: OptimizerSpec) -> Callable[[Any], torch.optim.Optimizer]:
    """A function of the parameters that makes the optimizer `spec` names."""
    if callable(spec):
        return spec
    if spec not in OPTIMIZERS:
        raise Error(f"unknown optimizer '{spec}' (hint: one of {', '.join(OPTIMIZERS)}, or a "
                    "function of the parameters that returns a torch.optim optimizer)")
    return OPTIMIZERS[spec]


def trace_module(model: torch.nn.Module, example_batch: Any, *, loss_fn: Optional[LossFn] = None,
                 optimizer: OptimizerSpec = "adamw",
                 batch_sizes: Tuple[int, ...] = TRACE_BATCHES,
                 autocast: Optional[str] = None) -> Dict[str, Any]:
    """The trace of `model` training on batches like `example_batch`, as a dict (nothing is
    written): pass it as trace= to trainfit.estimate or trainfit.fit. autocast: None (fp32),
    "cuda" or "cpu", as trainfit.trace takes it."""
    from .tracer import trace

    if not isinstance(model, torch.nn.Module):
        raise Error(f"model is a {type(model).__name__}, not a torch.nn.Module or a zoo name "
                    "(hint: trainfit.estimate(model, example_batch, batch=...))")
    batch_size(example_batch)
    template = _template(example_batch)
    # torch.compile's wrapper (PyTorch 2.x) is traced as the module it wraps, eagerly: the trace
    # shows eager PyTorch's tensors, an upper bound for what the compiled step keeps.
    original = getattr(model, "_orig_mod", None)
    if isinstance(original, torch.nn.Module):
        model = original
    make_optimizer = _optimizer(optimizer)
    targets: Optional[Tuple[int, Tuple[int, ...]]] = None
    if loss_fn is None:
        logits = _probe(model, example_batch)
        targets = (int(logits.shape[1]), tuple(int(d) for d in logits.shape[2:]))

    def make_batch(n: int) -> Tuple[Any, Any]:
        """Inputs like the example at batch n, and the default loss's target (or the inputs)."""
        inputs = _like(template, n)
        if targets is None:
            return inputs, inputs
        classes, rest = targets
        return inputs, torch.randint(0, classes, (n, *rest))

    def default_loss(output: Any, target: Any) -> torch.Tensor:
        """Cross-entropy of the output's logits against random classes."""
        return torch.nn.functional.cross_entropy(_logits(output), target)

    def given_loss(output: Any, inputs: Any) -> torch.Tensor:
        """The caller's loss_fn(output, inputs), checked to be a scalar."""
        assert loss_fn is not None
        loss = loss_fn(output, inputs)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise Error("loss_fn must return a scalar tensor (hint: reduce it, e.g. .mean())")
        return loss

    # Tracing trains the model for real (optimizer steps, BatchNorm statistics): its weights,
    # buffers, gradients and mode are put back afterwards, so the caller's model is unchanged.
    training = model.training
    with torch.no_grad():
        state = [(t, t.clone()) for t in list(model.parameters()) + list(model.buffers())]
    grads = [(p, p.grad) for p in model.parameters()]
    try:
        traced: Dict[str, Any] = trace(
            model, make_batch, given_loss if loss_fn is not None else default_loss,
            make_optimizer, batch_sizes=batch_sizes, name=type(model).__name__,
            autocast=autocast)
        return traced
    finally:
        with torch.no_grad():
            for t, saved in state:
                t.copy_(saved)
        for p, grad in grads:
            p.grad = grad
        model.train(training)
