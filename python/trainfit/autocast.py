"""CUDA's autocast on the CPU: a trace taken here under `cuda_autocast` records what a GPU's
training step under torch.autocast("cuda") allocates.

    with trainfit.autocast.cuda_autocast(torch.bfloat16):
        loss = loss_fn(model(x), y)

torch.autocast decides by the op what dtype its inputs are cast to. CUDA's lists (PyTorch 2.x,
aten/src/ATen/autocast_mode.h, restated below) run matmuls and convolutions in the lower
precision; exponentials, norms, softmax, sums and losses in fp32; a few ops in the widest dtype
of their inputs; everything else in whatever dtype arrives. The CPU's lists are other lists
(layer_norm is not cast there, so a Transformer's LayerNorm meets bf16 input and fp32 weights;
pooling, padding and cat are cast to fp32), so a trace under torch.autocast("cpu") would not
be what a GPU runs. `cuda_autocast` registers, for the duration of the `with`, a kernel at the
AutocastCPU dispatch key for every op on CUDA's lists that applies CUDA's policy, and one that
casts nothing for every op the CPU's lists cast and CUDA's do not, then enters
torch.autocast("cpu"). The kernels cast above autograd, as PyTorch's own do: autograd saves the
cast tensors, and backward runs in the dtypes a GPU's would.

As on CUDA, the lower-precision cast of a trainable fp32 leaf (a weight) is made once and
reused until the outermost `with` exits.

fp16 and bf16 are both two bytes and CUDA's lists are the same for both; the CPU runs bf16
(PyTorch 1.13 has few fp16 CPU kernels), and trainfit replays such a trace under `--precision
amp-fp16` with GradScaler's tensors added.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

# CUDA's autocast lists, PyTorch 2.x. An entry is "op" or "op.overload" (the overload "default"
# when none is named).
LOWER = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "convolution",
    "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot",
    "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar",
    "softplus", "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm.dim",
    "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
# fp32 through the op's own dtype argument, when the caller gave none.
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname",
    "log_softmax.int", "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum",
    "cumsum.dimname", "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord",
    "sum", "sum.dim_IntList", "sum.dim_DimnameList",
)
# fp32 by calling the overload that takes a dtype, with fp32 appended.
FP32_APPEND_DTYPE = {
    "norm.Scalar": "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",
}
PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
    "index_put", "tensordot", "scatter_add",
)
BANNED = ("binary_cross_entropy",)

_BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast; "
    "use torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss")


def policies() -> Dict[str, str]:
    """Every op on CUDA's lists and its policy: lower, fp32, fp32_set_opt_dtype,
    fp32_append_dtype, promote or banned."""
    table: Dict[str, str] = {}
    for names, policy in ((LOWER, "lower"), (FP32, "fp32"),
                          (FP32_SET_OPT_DTYPE, "fp32_set_opt_dtype"),
                          (tuple(FP32_APPEND_DTYPE), "fp32_append_dtype"), (PROMOTE, "promote"),
                          (BANNED, "banned")):
        for name in names:
            table[name] = policy
    return table


def _overload(name: str) -> Optional[Any]:
    """aten's OpOverload for "op" or "op.overload"; None when this PyTorch has no such op."""
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)  # type: ignore[attr-defined]
    if packet is None:
        return None
    try:
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return None


def _eligible(t: Any) -> bool:
    """A tensor autocast casts: floating point and not double."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _cpu_enabled() -> bool:
    """Whether the CPU's autocast is on (PyTorch 2.4 takes the device; 1.13 has its own call)."""
    try:
        return bool(torch.is_autocast_enabled("cpu"))  # type: ignore[call-arg]
    except TypeError:
        return bool(torch.is_autocast_cpu_enabled())


def _set_cpu_enabled(enabled: bool) -> None:
    """Turns the CPU's autocast on or off, as _cpu_enabled reads it."""
    try:
        torch.set_autocast_enabled("cpu", enabled)  # type: ignore[call-arg, arg-type]
    except TypeError:
        torch.set_autocast_cpu_enabled(enabled)


@contextlib.contextmanager
def _autocast_off() -> Iterator[None]:
    """What an autocast kernel runs under: autocast off, so that the op it calls dispatches on
    to autograd and the kernels."""
    was = _cpu_enabled()
    _set_cpu_enabled(False)
    try:
        yield
    finally:
        _set_cpu_enabled(was)


class _Casts:
    """The casts of one autocast region, with its cache of cast weights."""

    def __init__(self, lower: torch.dtype) -> None:
        """An empty cache for casts to `lower`, the autocast dtype."""
        self.lower = lower
        self.cache: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}

    def cast(self, to: torch.dtype, arg: Any) -> Any:
        """`arg` (a tensor, or a list of tensors and Nones) in `to`, as autocast's cached_cast
        makes it: the lower-precision copy of a trainable fp32 leaf is made once."""
        if isinstance(arg, (list, tuple)) and any(isinstance(a, torch.Tensor) for a in arg):
            return type(arg)(self.cast(to, a) for a in arg)
        if not _eligible(arg) or arg.dtype == to:
            return arg
        if (to == self.lower and arg.dtype == torch.float32 and arg.requires_grad and arg.is_leaf
                and not arg._is_view()):
            hit = self.cache.get(id(arg))
            if hit is not None and hit[0] is arg:
                return hit[1]
            made = arg.to(to)
            self.cache[id(arg)] = (arg, made)  # the source held, so that its id stays its own
            return made
        return arg.to(to)

    def widest(self, args: Any) -> torch.dtype:
        """The dtype the promote policy casts to: fp32 if any input is, else the lower one."""
        current = self.lower
        for a in args:
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if not _eligible(t):
                    continue
                if current == torch.float32 or t.dtype == torch.float32:
                    current = torch.float32
                elif t.dtype != self.lower:
                    raise RuntimeError(f"autocast: unexpected floating type {t.dtype} among "
                                       f"{self.lower} inputs")
        return current


def _kernel(op: Any, policy: str, casts: _Casts) -> Callable[..., Any]:
    """The AutocastCPU kernel that applies `policy` and calls `op`."""
    dtype_at = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), None)
    # An op PyTorch writes in other ops (cross_entropy_loss: log_softmax, then nll_loss) passes
    # on to them with autocast still on, as a fallthrough kernel would: they are cast by their
    # own lists.
    composite = policy == "pass" and hasattr(op, "decompose") and \
        torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")

    def run(*args: Any, **kwargs: Any) -> Any:
        """The op's call, its inputs cast by the policy."""
        if composite:
            return op.decompose(*args, **kwargs)
        with _autocast_off():
            if policy == "pass":
                return op(*args, **kwargs)
            if policy == "banned":
                raise RuntimeError(_BANNED_MESSAGE)
            if policy == "fp32_set_opt_dtype":
                if args and _eligible(args[0]):
                    if dtype_at is not None and dtype_at < len(args):
                        if args[dtype_at] is None:
                            args = args[:dtype_at] + (torch.float32,) + args[dtype_at + 1:]
                    elif kwargs.get("dtype") is None:
                        kwargs = dict(kwargs, dtype=torch.float32)
                return op(*args, **kwargs)
            if policy == "promote":
                to = casts.widest(tuple(args) + tuple(kwargs.values()))
            else:
                to = casts.lower if policy == "lower" else torch.float32
            args = tuple(casts.cast(to, a) for a in args)
            kwargs = {k: casts.cast(to, v) for k, v in kwargs.items()}
            return op(*args, **kwargs)
    return run


def _append_dtype_kernel(target: Any) -> Callable[..., Any]:
    """fp32_append_dtype: the overload that takes a dtype, called with fp32 (or the input's
    own dtype when autocast does not cast it)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        """The op's call through its overload with a dtype."""
        with _autocast_off():
            out = torch.float32 if args and _eligible(args[0]) else args[0].dtype
            return target(*args, **kwargs, dtype=out)
    return run


def _cpu_registrations() -> List[str]:
    """aten ops that have an AutocastCPU kernel in this PyTorch: "op" or "op.overload"."""
    names = torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU")
    return sorted(n[len("aten::"):] for n in names if n.startswith("aten::"))


def cpu_autocast() -> Any:
    """The CPU's own torch.autocast in bfloat16, its lists as they are."""
    return torch.autocast("cpu", dtype=torch.bfloat16)  # type: ignore[attr-defined]


@contextlib.contextmanager
def cuda_autocast(dtype: torch.dtype = torch.bfloat16) -> Iterator[None]:
    """torch.autocast("cpu", dtype) that casts as torch.autocast("cuda") does (module doc)."""
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"autocast runs in bfloat16 or float16, not {dtype}")
    casts = _Casts(dtype)
    table = policies()
    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            # PyTorch warns on each kernel that replaces the CPU's own.
            warnings.simplefilter("ignore")
            for name in _cpu_registrations():
                if name not in table:
                    op = _overload(name)
                    if op is not None:
                        library.impl(name, _kernel(op, "pass", casts), "AutocastCPU")
            for name, policy in table.items():
                op = _overload(name)
                if op is None:
                    continue  # not an op of this PyTorch
                if policy == "fp32_append_dtype":
                    target = _overload(FP32_APPEND_DTYPE[name])
                    if target is None:
                        continue
                    library.impl(name, _append_dtype_kernel(target), "AutocastCPU")
                else:
                    library.impl(name, _kernel(op, policy, casts), "AutocastCPU")
        with torch.autocast("cpu", dtype=dtype):  # type: ignore[attr-defined]
            yield
    finally:
        casts.cache.clear()
        # The registrations go with the library: the CPU's own kernels are back.
        if hasattr(library, "_destroy"):
            library._destroy()
        del library
