"""Records what a real PyTorch training step allocates and frees, op by op, on the CPU.

    import trainfit
    trainfit.trace(model, make_batch, loss_fn, make_optimizer, batch_sizes=(2, 3),
                   out="model.trace.json")

For each batch size the model trains `iterations` steps (forward and loss, backward,
optimizer.step(), zero_grad(set_to_none=True)) under a dispatch mode that sees every aten op,
including those autograd runs in backward and those inside the optimizer. After each op it
notes which tensor storages have died since the previous op (frees) and which storages the op
produced (allocations), with the op, the module it ran in, dtype and shape. Categories are
settled afterwards from what the run showed: storages autograd saved during forward are
activations, storages that became a parameter's .grad are gradients, storages the optimizer
keeps in its state are optimizer state. The format is documented in docs/trace-format.md.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch

try:  # the dispatch-level hook: public as __torch_dispatch__ since 1.13, same module in 2.x
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError as e:  # pragma: no cover
    raise ImportError("trainfit.trace needs PyTorch 1.13 or later (TorchDispatchMode)") from e
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten

FORMAT = "trainfit-trace"
VERSION = 1

# Markers of what is specific to CPU kernels, so that a cuda-profile replay can map it.
DROPOUT_NOISE = "dropout-noise"  # CPU dropout's noise tensor (input dtype); CUDA keeps a bool mask
# PyTorch 1.x sums two gradients of one tensor into a new one (old + new) in the autograd
# engine's input buffer; 2.x adds into the old one when nothing else holds it.
GRAD_SUM = "grad-sum"
_TORCH1 = torch.__version__.startswith("1.")

_PHASES = ("setup", "forward", "backward", "optimizer")


def _storage(t: torch.Tensor) -> Any:
    """A tensor's untyped storage, on PyTorch 1.13 and 2.x."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    s = t.storage()
    return s.untyped() if hasattr(s, "untyped") else s


# Asked of every live storage at each poll (poll_frees inlines it for that reason): the builtin,
# not StorageWeakRef.expired's Python wrapper around it.
_expired = getattr(torch.UntypedStorage, "_expired", None)


def _dead(ref: Any) -> bool:
    """Whether a StorageWeakRef's storage has been freed."""
    return bool(_expired(ref.cdata)) if _expired is not None else bool(ref.expired())


def _dtype_name(dtype: torch.dtype) -> str:
    """torch.float32 -> "float32"."""
    return str(dtype).replace("torch.", "")


def _op_name(func: Any) -> str:
    """An OpOverload's name without its overload: aten.convolution.default -> aten::convolution."""
    name = getattr(func, "__name__", str(func))
    packet = getattr(func, "overloadpacket", None)
    if packet is not None:
        name = getattr(packet, "__name__", name)
    name = name.split(".")[0]
    return f"aten::{name}"


class _Recorder(TorchDispatchMode):
    """Turns the ops of one run into alloc/free events."""

    def __init__(self, static_ptrs: Set[int]) -> None:
        """static_ptrs: the storages of parameters and buffers, allocated before the run."""
        super().__init__()
        self.static = static_ptrs  # parameters and buffers: allocated before the run
        self.live: Dict[int, List[Any]] = {}  # storage data_ptr -> [weak ref, event id]
        self.events: List[Dict[str, Any]] = []
        # event id -> the alloc event (a dict, completed after the run)
        self.allocs: Dict[int, Dict[str, Any]] = {}
        self.next_id = 0
        self.phase = "setup"
        self.iteration = 0
        self.modules: List[str] = []  # forward module path stack
        self.backward_module = ""
        self.outputs: Dict[str, List[int]] = {}  # module path -> its first output's shape, first call of iteration 1
        self.polled = False  # True until the next op or mark: no storage died since the poll
        # The nn.MultiheadAttention call whose attention core is running (_attention_hooks), and
        # the gradients of scaled queries whose division makes the gradient of the queries.
        self.attention: Optional[Dict[str, Any]] = None
        self.query_grads: Dict[int, int] = {}  # event id of q_scaled's gradient -> core's output

    def mark(self, phase: str, iteration: int) -> None:
        """Starts a phase of an iteration: a phase mark in the events, after the frees of the
        phase before."""
        self.polled = False
        self.poll_frees()
        self.phase, self.iteration = phase, iteration
        self.events.append({"phase": phase, "iteration": iteration})

    def module(self) -> str:
        """The path of the module the next op runs in ("" outside modules)."""
        if self.phase == "backward":
            return self.backward_module
        return self.modules[-1] if self.modules else ""

    def poll_frees(self) -> None:
        """Free events for the storages that died since the last poll.

        Polling looks at every live storage, so it runs only when it can matter: before an
        allocation and at a phase mark. Frees between two allocations come out in the same
        place as if each op were polled, so every level at an allocation, and so every peak,
        is the same."""
        if self.polled:
            return
        self.polled = True
        if _expired is not None:
            dead = [ptr for ptr, (ref, _) in self.live.items() if _expired(ref.cdata)]
        else:
            dead = [ptr for ptr, (ref, _) in self.live.items() if ref.expired()]
        for ptr in dead:
            self.events.append({"free": self.live.pop(ptr)[1]})

    def note(self, t: Any, op: str) -> Optional[Dict[str, Any]]:
        """The alloc event of a CPU tensor's storage not seen before (None otherwise)."""
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            return None
        s = _storage(t)
        nbytes = s.nbytes()
        ptr = s.data_ptr()
        if nbytes == 0 or ptr in self.static:
            return None
        entry = self.live.get(ptr)
        if entry is not None and not _dead(entry[0]):
            return None
        # A new storage (perhaps at the address of one that died since the last poll): the
        # frees come first.
        self.poll_frees()
        event = {"alloc": self.next_id, "bytes": nbytes, "category": "temporary",
                 "dtype": _dtype_name(t.dtype), "shape": list(t.shape), "op": op,
                 "module": self.module()}
        self.live[ptr] = [StorageWeakRef(s), self.next_id]
        self.allocs[self.next_id] = event
        self.events.append(event)
        self.next_id += 1
        return event

    def note_output(self, path: str, output: Any) -> None:
        """Keeps the shape of the first tensor in a module's output, once per path."""
        if path in self.outputs:
            return
        tensors = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)]
        if tensors:
            self.outputs[path] = list(tensors[0].shape)

    def id_of(self, t: Any) -> Optional[int]:
        """The event id of a live tensor's storage, or None."""
        if not isinstance(t, torch.Tensor):
            return None
        entry = self.live.get(_storage(t).data_ptr())
        return entry[1] if entry is not None and not _dead(entry[0]) else None

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: Optional[Dict[str, Any]] = None) -> Any:
        """Runs the op, then records the frees since the last op and the op's new storages."""
        out = func(*args, **(kwargs or {}))
        if (not isinstance(out, torch.Tensor) and isinstance(out, (int, float, bool)) and args
                and _op_name(func) in ("aten::detach", "aten::alias")):
            # PyTorch 1.13 hands a detached wrapped number (a Python scalar autograd saved)
            # back as a Python number, which the saved-tensor path cannot take; the scalar
            # tensor itself serves, as nothing can require its gradient.
            out = args[0]
        self.polled = False  # the op may have freed storages; note() polls before a new one
        op = _op_name(func)
        made = [self.note(t, op) for t in tree_flatten(out)[0]]
        if op in _CONV_ROLES:
            _note_convolution(op, args, out, made)
        if op == "aten::sum" and len(args) >= 2 and made and made[0] is not None:
            _note_reduction(args, made[0])
        if op == "aten::div" and args:
            if self.attention is not None and "scores" not in self.attention:
                self.attention["q"] = self.id_of(args[0])  # q_scaled = q / sqrt(head_dim)
            elif self.phase == "backward" and self.query_grads and made and made[0] is not None:
                of = self.query_grads.pop(self.id_of(args[0]) or -1, None)
                if of is not None:
                    made[0]["attention"] = {"role": "grad_q", "of": of}
        # Tensors first seen as arguments were made outside the dispatcher (torch.tensor(...)).
        for t in tree_flatten((args, kwargs))[0]:
            self.note(t, op)
        if (_TORCH1 and self.phase == "backward" and op == "aten::add" and len(args) == 2
                and isinstance(out, torch.Tensor) and all(
                    isinstance(a, torch.Tensor) and a.shape == out.shape and a.dtype == out.dtype
                    for a in args)):
            new, old = self.id_of(out), self.id_of(args[0])
            if new is not None and old is not None and new != old:
                self.allocs[new]["cpu"] = GRAD_SUM
                self.allocs[new]["sums"] = old
        if op == "aten::bernoulli_" and args:
            # CPU dropout: noise = empty_like(input).bernoulli_(1 - p), kept by MulBackward.
            i = self.id_of(args[0])
            if i is not None:
                self.allocs[i]["cpu"] = DROPOUT_NOISE
        return out

    def mark_attention(self, core: Dict[str, Any]) -> None:
        """Marks a finished attention core: its output's allocation says where the core began
        (q_scaled's allocation), which storages it read, and their shapes; hooks mark the
        start of its backward and the gradients of q, k and v (docs/trace-format.md)."""
        if not {"q", "scores", "out"} <= core.keys():
            return
        q_scaled, k_t, v, out = core["q_scaled"], core["k_t"], core["v"], core["out"]
        out_id, first, k, v_id = (self.id_of(t) for t in (out, q_scaled, k_t, v))
        if (out_id is None or first is None or k is None or v_id is None or core["q"] is None
                or not out.requires_grad):
            return  # not the core 1.13's multi_head_attention_forward runs: replayed as traced
        output: int = out_id  # the core's name in the marks of its backward
        self.allocs[output]["attention"] = {
            "role": "output", "first": first, "q": core["q"], "k": k, "v": v_id,
            "q_shape": list(q_scaled.shape), "k_shape": list(k_t.transpose(-2, -1).shape),
            "v_shape": list(v.shape), "mask": core["mask"]}

        def backward_starts(grad: torch.Tensor) -> None:
            """The output's gradient has arrived: the core's backward runs next."""
            self.events.append({"attention_backward": output})

        def gradient(role: str) -> Callable[[torch.Tensor], None]:
            """Marks the allocation of k's or v's gradient."""
            def hook(grad: torch.Tensor) -> None:
                """The gradient has been made."""
                i = self.id_of(grad)
                if i is not None:
                    self.allocs[i]["attention"] = {"role": role, "of": output}
            return hook

        def scaled_query(grad: torch.Tensor) -> None:
            """q_scaled's gradient: the division that follows makes q's."""
            i = self.id_of(grad)
            if i is not None:
                self.query_grads[i] = output

        out.register_hook(backward_starts)
        q_scaled.register_hook(scaled_query)
        k_t.register_hook(gradient("grad_k"))
        v.register_hook(gradient("grad_v"))


def _attention_hooks(model: torch.nn.Module, recorder: _Recorder) -> Callable[[], None]:
    """Marks the attention core of each nn.MultiheadAttention call that asks for no weights
    (need_weights=False): PyTorch 2.x runs it on CUDA as one fused kernel that keeps no score
    matrix, where 1.13's multi_head_attention_forward runs it op by op (q_scaled = q /
    sqrt(head_dim); bmm or baddbmm with the mask; softmax; dropout; bmm with v). A cuda-profile
    replay puts the fused kernel's allocations in its place. 2.x calls scaled_dot_product_attention
    itself, which its trace shows as it ran. Returns what undoes the hooks."""
    modules = [m for m in model.modules() if isinstance(m, torch.nn.MultiheadAttention)]
    if not modules or not _TORCH1:
        return lambda: None

    def product(original: Callable[..., Any], with_input: bool) -> Callable[..., Any]:
        """torch.bmm (with_input False) or torch.baddbmm, noting the core's two products."""
        def run(*args: Any, **kwargs: Any) -> Any:
            """The product, then what it was in the core."""
            out = original(*args, **kwargs)
            core = recorder.attention
            if core is not None and len(args) >= 2 + with_input:
                a, b = args[with_input], args[1 + with_input]
                if "scores" not in core:
                    core.update(scores=True, q_scaled=a, k_t=b, mask=with_input)
                elif "out" not in core:
                    core.update(v=b, out=out)
            return out
        return run

    def marked(module: torch.nn.MultiheadAttention) -> Callable[..., Any]:
        """The module's forward, with its core noted when it asks for no weights."""
        forward = module.forward
        signature = inspect.signature(type(module).forward)

        def run(*args: Any, **kwargs: Any) -> Any:
            """forward(query, key, value, key_padding_mask, need_weights, ...)."""
            try:
                need_weights = signature.bind(module, *args, **kwargs).arguments.get(
                    "need_weights", True)
            except TypeError:
                need_weights = True
            if need_weights or recorder.phase != "forward" or not torch.is_grad_enabled():
                return forward(*args, **kwargs)
            recorder.attention = {}
            try:
                return forward(*args, **kwargs)
            finally:
                core, recorder.attention = recorder.attention, None
                recorder.mark_attention(core)
        return run

    originals = (torch.bmm, torch.baddbmm)
    torch.bmm = product(originals[0], False)
    torch.baddbmm = product(originals[1], True)
    for m in modules:
        setattr(m, "forward", marked(m))  # the instance's own, which __call__ finds first

    def undo() -> None:
        """Restores torch.bmm, torch.baddbmm and each module's own forward."""
        torch.bmm, torch.baddbmm = originals
        for m in modules:
            del m.forward
    return undo


# What each output of a convolution op is, in order: the cuda profile adds the cuDNN workspace
# of the kernel that fills it (docs/trace-format.md, "conv").
_CONV_ROLES = {
    "aten::convolution": ("output",),
    "aten::convolution_backward": ("grad_input", "grad_weight", "grad_bias"),
}


def _note_convolution(op: str, args: Sequence[Any], out: Any,
                      made: List[Optional[Dict[str, Any]]]) -> None:
    """Marks the allocations a convolution made with the problem cuDNN would solve: the input,
    weight and output shapes, its geometry, and whether the input is channels_last.

    convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
    groups); convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)."""
    backward = op == "aten::convolution_backward"
    x, w = (args[1], args[2]) if backward else (args[0], args[1])
    y = args[0] if backward else out
    rest = args[4:10] if backward else args[3:9]
    stride, padding, dilation, transposed, _, groups = rest
    channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and \
        not x.is_contiguous()
    problem = {"input": list(x.shape), "weight": list(w.shape), "output": list(y.shape),
               "stride": list(stride), "padding": list(padding), "dilation": list(dilation),
               "groups": int(groups), "transposed": bool(transposed),
               "channels_last": bool(channels_last)}
    # `made` has an entry per output (None where no new storage: an output not asked for).
    for role, event in zip(_CONV_ROLES[op], made):
        if event is not None:
            event["conv"] = dict(problem, role=role)


def _note_reduction(args: Sequence[Any], event: Dict[str, Any]) -> None:
    """Marks a sum over some dimensions (sum.dim_IntList(self, dim, keepdim)) with its input
    and the dimensions it reduces: on CUDA a reduction of many values into few results stages
    partial sums in a buffer of its own (docs/trace-format.md, "reduce")."""
    x, dims = args[0], args[1]
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return
    rank = x.dim()
    reduced = sorted({int(d) % rank for d in dims} if dims else range(rank))
    event["reduce"] = {"input": list(x.shape), "dims": reduced,
                       "contiguous": bool(x.is_contiguous())}


def _module_hooks(model: torch.nn.Module, recorder: _Recorder) -> List[Any]:
    """Forward hooks keep the module path stack; a hook on each module's output gradient
    tells backward which module it is in."""
    handles = []

    def enter(path: str) -> Callable[[torch.nn.Module, Any], None]:
        """The pre-hook of the module at `path`: pushes it on the stack."""
        def hook(module: torch.nn.Module, inputs: Any) -> None:
            """Entering the module."""
            recorder.modules.append(path)
        return hook

    def leave(path: str) -> Callable[[torch.nn.Module, Any, Any], None]:
        """The forward hook of the module at `path`: pops it, keeps its output's shape, and
        hooks its output's gradient."""
        def grad_hook(grad: torch.Tensor) -> None:
            """Backward reaches the module's output."""
            recorder.backward_module = path

        def hook(module: torch.nn.Module, inputs: Any, output: Any) -> None:
            """Leaving the module."""
            if recorder.modules:
                recorder.modules.pop()
            if recorder.iteration == 1 and recorder.phase == "forward":
                recorder.note_output(path, output)
            if torch.is_grad_enabled():
                for t in tree_flatten(output)[0]:
                    if isinstance(t, torch.Tensor) and t.requires_grad:
                        t.register_hook(grad_hook)
        return hook

    for path, m in model.named_modules():
        if not path:
            continue
        handles.append(m.register_forward_pre_hook(enter(path)))
        handles.append(m.register_forward_hook(leave(path)))
    return handles


def call_model(model: torch.nn.Module, inputs: Any) -> Any:
    """model(**inputs) for a dict, model(*inputs) for a tuple or list, else model(inputs)."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _describe_optimizer(opt: torch.optim.Optimizer, index_of: Dict[int, int]) -> Dict[str, Any]:
    """The optimizer as trainfit's replay needs it: its kind, implementation and groups."""
    name = type(opt).__name__
    groups = []
    kind: Optional[str] = None
    impl = "loop"
    for g in opt.param_groups:
        group: Dict[str, Any] = {"params": [index_of[id(p)] for p in g["params"] if id(p) in index_of]}
        for key in ("lr", "weight_decay", "momentum", "dampening", "nesterov", "amsgrad",
                    "maximize", "foreach", "fused"):
            if key in g and (g[key] is None or isinstance(g[key], (int, float, bool))):
                group[key] = g[key]
        groups.append(group)
        if g.get("fused"):
            impl = "fused"
        elif g.get("foreach"):
            impl = "foreach"
    first = opt.param_groups[0] if opt.param_groups else {}
    if name == "SGD":
        kind = "momentum" if first.get("momentum", 0) else "sgd"
    elif name in ("Adam", "AdamW") and not first.get("amsgrad", False):
        kind = name.lower()
    return {"type": name, "kind": kind, "impl": impl, "groups": groups}


def _unpack(t: torch.Tensor) -> torch.Tensor:
    """Autograd's saved tensors come back as they were packed."""
    return t


MakeBatch = Callable[[int], Tuple[Any, Any]]
LossFn = Callable[[Any, Any], torch.Tensor]
MakeOptimizer = Callable[[Any], torch.optim.Optimizer]
Params = List[Tuple[str, torch.Tensor]]


def _autocast(lists: Optional[str]) -> Callable[[], Any]:
    """What forward and the loss run under: nothing, CUDA's autocast lists (trainfit.autocast),
    or the CPU's own torch.autocast, in bfloat16."""
    if lists is None:
        return contextlib.nullcontext
    if lists == "cuda":
        from .autocast import cuda_autocast
        return lambda: cuda_autocast(torch.bfloat16)
    if lists == "cpu":
        from .autocast import cpu_autocast
        return cpu_autocast
    raise ValueError(f"autocast is 'cuda' or 'cpu' (whose op lists cast), not {lists!r}")


def _run(model: torch.nn.Module, make_batch: MakeBatch, loss_fn: LossFn,
         make_optimizer: MakeOptimizer, batch: int, iterations: int, params: Params,
         autocast: Callable[[], Any] = contextlib.nullcontext,
         ) -> Tuple[List[Dict[str, Any]], Dict[str, List[int]], Dict[str, Any]]:
    """One run at `batch`: its events, its modules' output shapes and the optimizer's
    description. Forward and the loss run under `autocast()`."""
    static = {_storage(t).data_ptr() for _, t in params}
    recorder = _Recorder(static)
    handles = _module_hooks(model, recorder)
    unmark_attention = _attention_hooks(model, recorder)
    opt = make_optimizer([p for _, p in params if isinstance(p, torch.nn.Parameter)
                          and p.requires_grad])
    index_of = {id(t): i for i, (_, t) in enumerate(params)}
    saved: Set[int] = set()
    # loss_fn's ops are reported under a module of their own, as trainfit's zoo does.
    paths = {path for path, _ in model.named_modules()}
    loss_path = next((p for p in ("loss", "loss_fn") if p not in paths), "(loss)")

    def pack(t: torch.Tensor) -> torch.Tensor:
        """Autograd saves t: it is an activation. A tensor with a grad_fn is saved detached,
        as autograd saves a node's own output without its grad_fn: the tensor itself would
        make a cycle (node -> tensor -> node) that outlives a branch backward never reaches
        (GoogLeNet's auxiliary heads), and the trace would keep what PyTorch frees. (Detaching
        a scalar autograd wrapped from a Python number fails under 1.13; it has no grad_fn.)"""
        i = recorder.id_of(t)
        if i is not None:
            saved.add(i)
        return t.detach() if t.grad_fn is not None else t

    # Parameters and buffers (tied ones share a storage) exist before the run.
    recorder.mark("setup", 0)
    seen: Dict[int, int] = {}
    for index, (_, t) in enumerate(params):
        s = _storage(t)
        if s.data_ptr() in seen or s.nbytes() == 0:
            continue
        seen[s.data_ptr()] = index
        recorder.events.append({"alloc": recorder.next_id, "bytes": s.nbytes(),
                                "category": "parameter", "dtype": _dtype_name(t.dtype),
                                "shape": list(t.shape), "param": index})
        recorder.next_id += 1
    try:
        with recorder, torch.autograd.graph.saved_tensors_hooks(pack, _unpack):
            for it in range(1, iterations + 1):
                recorder.mark("forward", it)
                inputs, target = make_batch(batch)
                batch_ids = {recorder.id_of(t) for t in tree_flatten((inputs, target))[0]}
                with autocast():
                    out = call_model(model, inputs)
                    if it == 1:
                        recorder.note_output("", out)
                    recorder.modules.append(loss_path)
                    loss = loss_fn(out, target)
                    recorder.modules.pop()
                if it == 1:
                    recorder.note_output(loss_path, loss)
                for i in batch_ids:
                    if i is not None:
                        recorder.allocs[i]["category"] = "input"
                for i in saved:
                    if recorder.allocs[i]["category"] == "temporary":
                        recorder.allocs[i]["category"] = "activation"
                saved.clear()
                recorder.mark("backward", it)
                recorder.backward_module = loss_path
                loss.backward()
                for index, (_, p) in enumerate(params):
                    i = recorder.id_of(p.grad) if isinstance(p, torch.nn.Parameter) else None
                    if i is not None:
                        recorder.allocs[i]["category"] = "gradient"
                        recorder.allocs[i]["param"] = index
                recorder.mark("optimizer", it)
                opt.step()
                for state in opt.state.values():
                    for t in state.values():
                        i = recorder.id_of(t)
                        if i is not None and recorder.allocs[i]["category"] == "temporary":
                            recorder.allocs[i]["category"] = "optimizer_state"
                opt.zero_grad(set_to_none=True)
                del inputs, target, out, loss
            recorder.mark("end", iterations)
    finally:
        for h in handles:
            h.remove()
        unmark_attention()
    return recorder.events, recorder.outputs, _describe_optimizer(opt, index_of)


def trace(model: torch.nn.Module, make_batch: MakeBatch, loss_fn: LossFn,
          make_optimizer: MakeOptimizer, batch_sizes: Sequence[int] = (2, 3),
          out: Optional[str] = None, iterations: int = 2, name: Optional[str] = None,
          progress: Optional[Callable[[int, float], None]] = None,
          autocast: Optional[str] = None) -> Dict[str, Any]:
    """Traces `iterations` training steps at each batch size; returns the trace as a dict and
    writes it to `out` (a path) when given.

    autocast "cuda" runs forward and the loss under torch.autocast as a GPU does (CUDA's op
    lists, trainfit.autocast) in bfloat16, for `trainfit estimate --precision amp-bf16` or
    `amp-fp16`; "cpu" under the CPU's own torch.autocast, for `--device-profile cpu`.

    make_batch(n) -> (inputs, target): inputs is a tensor, a tuple of tensors (model(*inputs))
    or a dict (model(**inputs)); loss_fn(output, target) -> a scalar tensor;
    make_optimizer(params) -> a torch.optim optimizer over the trainable parameters.
    progress(batch, seconds), when given, is called after each batch size.
    """
    if len(batch_sizes) < 2 or len(set(batch_sizes)) != len(batch_sizes):
        raise ValueError("batch_sizes needs at least two different sizes, e.g. (2, 3)")
    if any(int(b) < 1 for b in batch_sizes):
        raise ValueError("batch sizes must be at least 1")
    under = _autocast(autocast)
    model.train()
    params: Params = list(model.named_parameters()) + list(model.named_buffers())
    parameters = []
    for n, t in params:
        parameters.append({"name": n, "bytes": _storage(t).nbytes(), "dtype": _dtype_name(t.dtype),
                           "shape": list(t.shape), "buffer": not isinstance(t, torch.nn.Parameter),
                           "trainable": isinstance(t, torch.nn.Parameter) and t.requires_grad})
    runs = []
    optimizer = None
    start = time.monotonic()
    # Debian's CPU PyTorch starts with one thread, where convolutions take a path ten times
    # slower; the ops and their outputs are the same with every thread count.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(threads, os.cpu_count() or 1))
    try:
        for b in batch_sizes:
            begun = time.monotonic()
            events, outputs, optimizer = _run(model, make_batch, loss_fn, make_optimizer, int(b),
                                              iterations, params, under)
            runs.append({"batch": int(b), "iterations": iterations, "outputs": outputs,
                         "events": events})
            if progress is not None:
                progress(int(b), time.monotonic() - begun)
    finally:
        torch.set_num_threads(threads)
    result = {
        "format": FORMAT,
        "version": VERSION,
        "model": name or type(model).__name__,
        "torch": torch.__version__,
        "device": "cpu",
        "seconds": round(time.monotonic() - start, 3),
        "optimizer": optimizer,
        **({"autocast": {"dtype": "bfloat16", "lists": autocast}} if autocast else {}),
        "parameters": parameters,
        "modules": [{"path": path, "type": type(m).__name__} for path, m in model.named_modules()],
        "runs": runs,
    }
    if out is not None:
        with open(out, "w") as f:
            json.dump(result, f, separators=(",", ":"))
    return result
