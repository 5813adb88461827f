"""Per-op test cases, measured on real PyTorch (CPU) and recorded in tests/data/op_cases.json.

Each case runs one op on small tensors under saved_tensors_hooks and records the first output's
shape and dtype, which inputs autograd keeps, the bytes and count of new storages it keeps
(indices, masks, statistics, copies), and the op's parameter count. src/graph/ops_test.cc replays
every case through trainfit's registry under the cpu profile and must agree exactly.

    /usr/bin/python3 validation/op_cases.py --write      # regenerate the JSON
    /usr/bin/python3 validation/op_cases.py --check      # what check_ops_current runs
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import gpt2_reference
from harness import storage_of

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "op_cases.json")


def T(*shape, dtype="float32", grad=True, permute=None, kind="normal"):
    """An input: `shape` is the final shape; with `permute`, a contiguous tensor is permuted."""
    return {"shape": list(shape), "dtype": dtype, "requires_grad": grad,
            "permute": permute, "kind": kind}


def I(*shape, high=5):
    return T(*shape, dtype="int64", grad=False, kind=f"index{high}")


def M(*shape):
    return T(*shape, dtype="bool", grad=False, kind="mask")


def case(op, attrs, inputs, args=None, trainable=True, name=None, autocast=False):
    """autocast: run under torch.autocast("cpu", bfloat16), the module's parameters fp32."""
    c = {"id": name or op, "op": op, "attrs": attrs, "inputs": inputs,
         "args": args if args is not None else list(range(len(inputs))),
         "params_trainable": trainable}
    if autocast:
        c["autocast"] = "bfloat16"
    return c


A = (2, 4, 6, 6)
ACTIVATIONS = ["relu", "relu6", "silu", "mish", "sigmoid", "tanh", "hardswish", "hardsigmoid"]
CASES = [
    case("conv1d", {"out_channels": 3, "kernel_size": 3}, [T(2, 4, 9)]),
    case("conv2d", {"out_channels": 3, "kernel_size": 3, "padding": 1}, [T(*A)]),
    case("conv2d", {"out_channels": 4, "kernel_size": 3, "stride": 2, "dilation": 2, "groups": 2,
                    "bias": False}, [T(2, 4, 9, 9)], name="conv2d_strided_grouped"),
    case("conv2d", {"out_channels": 3, "kernel_size": 3}, [T(*A, grad=False)], name="conv2d_first_layer"),
    case("conv2d", {"out_channels": 3, "kernel_size": 3}, [T(*A)], trainable=False, name="conv2d_frozen"),
    case("conv_transpose1d", {"out_channels": 3, "kernel_size": 3, "stride": 2}, [T(2, 4, 5)]),
    case("conv_transpose2d", {"out_channels": 6, "kernel_size": 3, "stride": 2, "padding": 1,
                              "output_padding": 1, "groups": 2}, [T(2, 4, 5, 5)]),
    case("linear", {"out_features": 7}, [T(3, 5)]),
    case("linear", {"out_features": 7}, [T(2, 3, 5)], name="linear_3d"),
    case("linear", {"out_features": 7}, [T(2, 2, 3, 5)], name="linear_4d"),
    case("linear", {"out_features": 7}, [T(3, 2, 5, permute=[1, 0, 2])], name="linear_transposed_input"),
    case("linear", {"out_features": 7}, [T(3, 2, 5, permute=[1, 0, 2])], trainable=False,
         name="linear_transposed_input_frozen"),
    case("linear", {"out_features": 7, "bias": False}, [T(3, 5)], name="linear_no_bias"),
    case("linear", {"out_features": 7}, [T(3, 5, grad=False)], name="linear_first_layer"),
    case("linear", {"out_features": 7}, [T(3, 5, dtype="bfloat16")], name="linear_bf16"),
    case("linear_transposed", {"out_features": 7}, [T(2, 3, 5)]),
    case("matmul", {}, [T(2, 3, 4), T(4, 5)], name="matmul_fold"),
    case("matmul", {}, [T(2, 2, 3, 4), T(2, 2, 4, 5)], name="matmul_batched"),
    case("matmul", {}, [T(2, 2, 3, 4, permute=[0, 2, 1, 3]), T(2, 2, 4, 5, permute=[0, 2, 3, 1])],
         name="matmul_batched_copies"),
    case("matmul", {}, [T(3, 4), T(4, 5)], name="matmul_2d"),
    case("bmm", {}, [T(2, 3, 4), T(2, 4, 5)]),
    case("bmm", {}, [T(2, 3, 4, grad=False), T(2, 4, 5)], name="bmm_one_grad"),
    case("baddbmm", {}, [T(1, 3, 5, grad=False), T(2, 3, 4), T(2, 4, 5)]),
    case("batch_norm", {}, [T(*A)], name="batch_norm_train"),
    case("batch_norm", {"training": False}, [T(*A)], name="batch_norm_eval"),
    case("batch_norm", {}, [T(4, 5)], name="batch_norm_1d"),
    case("batch_norm", {"affine": False}, [T(*A)], name="batch_norm_no_affine"),
    case("frozen_batch_norm", {}, [T(*A)]),
    case("frozen_batch_norm", {}, [T(*A, grad=False)], name="frozen_batch_norm_no_grad"),
    case("layer_norm", {"normalized_shape": [8]}, [T(2, 3, 8)]),
    case("layer_norm", {"normalized_shape": [8]}, [T(3, 2, 8, permute=[1, 0, 2])], name="layer_norm_transposed"),
    case("layer_norm", {"normalized_shape": [3, 8], "elementwise_affine": False}, [T(2, 3, 8)],
         name="layer_norm_2d_no_affine"),
    case("layer_norm", {"normalized_shape": [8]}, [T(2, 3, 8, dtype="bfloat16")], name="layer_norm_bf16"),
    case("group_norm", {"num_groups": 2}, [T(*A)]),
    case("group_norm", {"num_groups": 2}, [T(2, 4, 6, 6, permute=[0, 1, 3, 2])], name="group_norm_transposed"),
    case("gelu", {}, [T(*A)]),
    case("gelu", {"approximate": "tanh"}, [T(*A)], name="gelu_tanh"),
    case("gelu", {}, [T(*A, dtype="bfloat16")], name="gelu_bf16"),
    case("relu", {}, [T(2, 4, 6, 6, permute=[0, 3, 1, 2])], name="relu_permuted"),
    case("softmax", {"dim": -1}, [T(*A)]),
    case("softmax", {"dim": 1}, [T(*A)], name="softmax_dim1"),
    case("softmax", {"dim": -1}, [T(2, 4, 6, 6, permute=[0, 3, 1, 2])], name="softmax_permuted"),
    case("log_softmax", {"dim": -1}, [T(3, 5)]),
    case("dropout", {"p": 0.1}, [T(*A)]),
    case("dropout", {"p": 0.1, "inplace": True}, [T(*A)], name="dropout_inplace"),
    case("dropout", {"p": 0.0}, [T(*A)], name="dropout_p0"),
    case("dropout", {"p": 0.3, "training": False}, [T(*A)], name="dropout_eval"),
    case("max_pool1d", {"kernel_size": 2}, [T(2, 4, 9)]),
    case("max_pool2d", {"kernel_size": 3, "stride": 2, "padding": 1}, [T(2, 4, 7, 7)]),
    case("max_pool2d", {"kernel_size": 2, "ceil_mode": True}, [T(2, 4, 7, 7)], name="max_pool2d_ceil"),
    case("max_pool2d", {"kernel_size": 2}, [T(*A, grad=False)], name="max_pool2d_no_grad"),
    case("avg_pool1d", {"kernel_size": 3, "stride": 2}, [T(2, 4, 9)]),
    case("avg_pool2d", {"kernel_size": 2}, [T(*A)]),
    case("adaptive_avg_pool1d", {"output_size": [1]}, [T(2, 4, 9)]),
    case("adaptive_avg_pool2d", {"output_size": [1, 1]}, [T(*A)]),
    case("adaptive_avg_pool2d", {"output_size": [3, 3]}, [T(*A)], name="adaptive_avg_pool2d_3x3"),
    case("add", {}, [T(*A), T(*A)]),
    case("add", {"inplace": True}, [T(*A), T(*A)], name="add_inplace"),
    case("add", {}, [T(*A), T(4, 1, 1)], name="add_broadcast"),
    case("add", {}, [T(3, 2, 4, permute=[1, 0, 2]), T(3, 2, 4)], name="add_mixed_layouts"),
    case("sub", {}, [T(*A), T(*A)]),
    case("mul", {}, [T(*A), T(*A)]),
    case("mul", {}, [T(*A), T(*A, grad=False)], name="mul_one_grad"),
    case("div", {}, [T(*A), T(*A, kind="positive")]),
    case("div", {}, [T(*A), T(*A, grad=False, kind="positive")], name="div_constant_divisor"),
    case("add_scalar", {"value": 1.5}, [T(*A)]),
    case("sub_scalar", {"value": 1.5}, [T(*A)]),
    case("rsub_scalar", {"value": 1.5}, [T(*A)]),
    case("mul_scalar", {"value": 1.5}, [T(*A)]),
    case("mul_scalar", {"value": 1.5, "inplace": True}, [T(*A)], name="mul_scalar_inplace"),
    case("div_scalar", {"value": 1.5}, [T(*A)]),
    case("pow_scalar", {"exponent": 3.0}, [T(*A)]),
    case("rsqrt", {}, [T(*A, kind="positive")]),
    case("exp", {}, [T(*A)]),
    case("abs", {}, [T(*A)]),
    case("neg", {}, [T(*A)]),
    case("where", {}, [M(*A), T(*A), T(*A)]),
    case("masked_fill", {"value": -1.0}, [T(*A), M(*A)]),
    case("masked_fill", {"value": -1.0, "inplace": True}, [T(*A), M(1, 4, 1, 6)], name="masked_fill_inplace"),
    case("to_copy", {"dtype": "bfloat16"}, [T(*A)]),
    case("to_copy", {"dtype": "float32"}, [T(*A, dtype="bfloat16")], name="to_copy_up"),
    case("view", {"shape": [2, -1]}, [T(*A)]),
    case("reshape", {"shape": [8, 36]}, [T(*A)]),
    case("reshape", {"shape": [8, 36]}, [T(2, 4, 6, 6, permute=[0, 3, 1, 2])], name="reshape_copies"),
    case("flatten", {"start_dim": 1}, [T(*A)]),
    case("flatten", {"start_dim": 1}, [T(2, 4, 6, 6, permute=[0, 3, 1, 2])], name="flatten_copies"),
    case("unflatten", {"dim": 1, "sizes": [2, 2]}, [T(*A)]),
    case("permute", {"dims": [0, 2, 3, 1]}, [T(*A)]),
    case("transpose", {"dim0": 1, "dim1": 3}, [T(*A)]),
    case("contiguous", {}, [T(2, 4, 6, 6, permute=[0, 3, 1, 2])]),
    case("contiguous", {}, [T(*A)], name="contiguous_noop"),
    case("clone", {}, [T(2, 3, 4)]),
    case("expand", {"sizes": [3, -1, -1]}, [T(1, 4, 5)]),
    case("select", {"dim": 1, "index": 0}, [T(*A)]),
    case("slice", {"dim": 2, "start": 1, "end": 5, "step": 2}, [T(*A)]),
    case("unsqueeze", {"dim": 1}, [T(2, 3)]),
    case("squeeze", {"dim": 1}, [T(2, 1, 3)]),
    case("chunk", {"chunks": 3, "dim": 1}, [T(2, 7, 3)]),
    case("split", {"sizes": [2, 3], "dim": 1}, [T(2, 5, 3)]),
    case("unbind", {"dim": 1}, [T(2, 3, 4)]),
    case("pad", {"pads": [0, 1], "value": -100.0}, [I(2, 5)]),
    case("cat", {"dim": 1}, [T(*A), T(*A)]),
    case("cat", {"dim": 1}, [T(2, 4, 6, 6, permute=[0, 3, 1, 2]), T(*A)], name="cat_mixed_layouts"),
    case("stack", {"dim": 0}, [T(*A), T(*A)]),
    case("arange", {"end": 7}, []),
    case("full", {"shape": [2, 3], "value": 1.0}, []),
    case("topk", {"k": 2, "dim": -1}, [T(6, 5)]),
    case("index", {"dim": 1}, [T(1, 6, 4), I(3, high=6)]),
    case("index", {"dim": 0}, [T(6, 2, 1), I(4, high=6), I(4, high=2)], name="index_two"),
    case("index_add", {"dim": 0}, [T(6, 4, grad=False), I(3, high=6), T(3, 4)]),
    case("div", {"inplace": True}, [T(6, 2), T(6, 1)], name="div_inplace"),
    case("mul", {"inplace": True}, [T(6, 2), T(6, 2)], name="mul_inplace"),
    case("full", {"dtype": "float32"}, [M(2, 3)], name="full_like"),
    case("sum", {"dims": [1]}, [T(*A)]),
    case("sum", {}, [T(*A)], name="sum_all"),
    case("mean", {"dims": [2, 3], "keepdim": True}, [T(*A)]),
    case("mean", {}, [T(*A)], name="mean_all"),
    case("sum", {}, [M(2, 3)], name="sum_bool"),
    case("clamp_min", {"min": 1.0}, [T(*A)]),
    case("logical_not", {}, [M(2, 3)]),
    case("multi_head_attention", {"embed_dim": 8, "num_heads": 2}, [T(5, 2, 8)], args=[0, 0, 0],
         name="mha_self"),
    case("multi_head_attention", {"embed_dim": 8, "num_heads": 2, "batch_first": True,
                                  "need_weights": False}, [T(2, 5, 8)], args=[0, 0, 0],
         name="mha_batch_first_no_weights"),
    case("multi_head_attention", {"embed_dim": 8, "num_heads": 2, "dropout": 0.1}, [T(5, 2, 8)],
         args=[0, 0, 0], name="mha_dropout"),
    case("multi_head_attention", {"embed_dim": 8, "num_heads": 2}, [T(5, 2, 8), T(7, 2, 8)],
         args=[0, 1, 1], name="mha_cross"),
    case("multi_head_attention", {"embed_dim": 8, "num_heads": 2}, [T(5, 2, 8), T(5, 2, 8)],
         args=[0, 0, 1], name="mha_separate_value"),
    case("multi_head_attention", {"embed_dim": 8, "num_heads": 2}, [T(5, 2, 8), M(2, 5)],
         args=[0, 0, 0, 1], name="mha_key_padding_mask"),
    case("nll_loss", {}, [T(3, 5), I(3, high=5)]),
    case("cross_entropy", {}, [T(3, 5), I(3, high=5)]),
    case("mse_loss", {}, [T(3, 5), T(3, 5, grad=False)]),
    case("l1_loss", {}, [T(3, 5), T(3, 5, grad=False)]),
    case("embedding", {"num_embeddings": 10, "embedding_dim": 4}, [I(2, 3, high=10)]),
    case("embedding", {"num_embeddings": 10, "embedding_dim": 4}, [I(2, 3, high=10)], trainable=False,
         name="embedding_frozen"),
]
for act in ACTIVATIONS:
    CASES.append(case(act, {}, [T(*A)]))
    CASES.append(case(act, {"inplace": True}, [T(*A)], name=f"{act}_inplace"))
# Under CPU autocast (the cpu profile's amp-bf16): the products and convolutions lowered, with the
# weights' casts; the transposed convolution, pow, softmax, log_softmax and the reductions left
# in the dtype that arrives; the losses, and cross_entropy before its log_softmax, in fp32; cat
# promoting.
BF = "bfloat16"
CASES += [
    case("linear", {"out_features": 7}, [T(3, 5)], name="linear_autocast", autocast=True),
    case("linear", {"out_features": 7}, [T(3, 5)], trainable=False, name="linear_frozen_autocast",
         autocast=True),
    case("matmul", {}, [T(2, 3, 4), T(4, 5)], name="matmul_autocast", autocast=True),
    case("conv2d", {"out_channels": 3, "kernel_size": 3, "padding": 1}, [T(*A)],
         name="conv2d_autocast", autocast=True),
    case("conv_transpose2d", {"out_channels": 3, "kernel_size": 3, "stride": 2}, [T(2, 4, 5, 5)],
         name="conv_transpose2d_autocast", autocast=True),
    case("pow_scalar", {"exponent": 2.0}, [T(*A, dtype=BF)], name="pow_scalar_autocast",
         autocast=True),
    case("rsqrt", {}, [T(*A, dtype=BF, kind="positive")], name="rsqrt_autocast", autocast=True),
    case("softmax", {"dim": -1}, [T(*A, dtype=BF)], name="softmax_autocast", autocast=True),
    case("log_softmax", {"dim": -1}, [T(3, 5, dtype=BF)], name="log_softmax_autocast",
         autocast=True),
    case("sum", {"dims": [1]}, [T(*A, dtype=BF)], name="sum_autocast", autocast=True),
    case("cross_entropy", {}, [T(3, 5, dtype=BF), I(3, high=5)], name="cross_entropy_autocast",
         autocast=True),
    case("nll_loss", {}, [T(3, 5, dtype=BF), I(3, high=5)], name="nll_loss_autocast",
         autocast=True),
    case("mse_loss", {}, [T(3, 5, dtype=BF), T(3, 5, grad=False)], name="mse_loss_autocast",
         autocast=True),
    case("cat", {"dim": 0}, [T(2, 3), T(2, 3, dtype=BF)], name="cat_autocast", autocast=True),
]


# ---- torch implementations --------------------------------------------------------------

def _conv(nd, transposed):
    def run(a, x):
        cls = {(1, False): nn.Conv1d, (2, False): nn.Conv2d,
               (1, True): nn.ConvTranspose1d, (2, True): nn.ConvTranspose2d}[(nd, transposed)]
        kw = dict(kernel_size=a["kernel_size"], stride=a.get("stride", 1), padding=a.get("padding", 0),
                  dilation=a.get("dilation", 1), groups=a.get("groups", 1), bias=a.get("bias", True))
        if transposed:
            kw["output_padding"] = a.get("output_padding", 0)
        m = cls(x.shape[1], a["out_channels"], **kw)
        return m, lambda: m(x)
    return run


def _norm_module(a, x):
    if x.dim() == 2:
        return nn.BatchNorm1d(x.shape[1], affine=a.get("affine", True))
    return nn.BatchNorm2d(x.shape[1], affine=a.get("affine", True))


def _batch_norm(a, x):
    m = _norm_module(a, x)
    m.train(a.get("training", True))
    return m, lambda: m(x)


def _frozen_bn(a, x):
    from torchvision.ops.misc import FrozenBatchNorm2d
    m = FrozenBatchNorm2d(x.shape[1])
    return m, lambda: m(x)


def _mha(a, *xs):
    m = nn.MultiheadAttention(a["embed_dim"], a["num_heads"], dropout=a.get("dropout", 0.0),
                              batch_first=a.get("batch_first", False))
    q, k, v = xs[:3]
    kpm = xs[3] if len(xs) > 3 else None
    return m, lambda: m(q, k, v, key_padding_mask=kpm, need_weights=a.get("need_weights", True))[0]


def _simple(fn):
    return lambda a, *xs: (None, lambda: fn(a, *xs))


def _inplace_act(name):
    functional = {"relu": F.relu, "relu6": F.relu6, "silu": F.silu, "mish": F.mish,
                  "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid}
    def fn(a, x):
        inplace = a.get("inplace", False)
        if name in functional:
            return functional[name](x, inplace=inplace)
        method = getattr(x, name + "_") if inplace else getattr(torch, name)
        return method() if inplace else method(x)
    return fn


IMPLS = {
    "conv1d": _conv(1, False), "conv2d": _conv(2, False),
    "conv_transpose1d": _conv(1, True), "conv_transpose2d": _conv(2, True),
    "linear": lambda a, x: (lambda m: (m, lambda: m(x)))(
        nn.Linear(x.shape[-1], a["out_features"], bias=a.get("bias", True)).to(x.dtype)),
    "linear_transposed": lambda a, x: (lambda m: (m, lambda: m(x)))(
        gpt2_reference.Conv1D(a["out_features"], x.shape[-1])),
    "matmul": _simple(lambda a, x, y: torch.matmul(x, y)),
    "bmm": _simple(lambda a, x, y: torch.bmm(x, y)),
    "baddbmm": _simple(lambda a, m, x, y: torch.baddbmm(m, x, y)),
    "batch_norm": _batch_norm,
    "frozen_batch_norm": _frozen_bn,
    "layer_norm": lambda a, x: (lambda m: (m, lambda: m(x)))(
        nn.LayerNorm(a["normalized_shape"], elementwise_affine=a.get("elementwise_affine", True)).to(x.dtype)),
    "group_norm": lambda a, x: (lambda m: (m, lambda: m(x)))(nn.GroupNorm(a["num_groups"], x.shape[1])),
    "gelu": _simple(lambda a, x: F.gelu(x, approximate=a.get("approximate", "none"))),
    "softmax": _simple(lambda a, x: F.softmax(x, a["dim"])),
    "log_softmax": _simple(lambda a, x: F.log_softmax(x, a["dim"])),
    "dropout": _simple(lambda a, x: F.dropout(x, a["p"], a.get("training", True), a.get("inplace", False))),
    "max_pool1d": _simple(lambda a, x: F.max_pool1d(x, a["kernel_size"], a.get("stride"), a.get("padding", 0))),
    "max_pool2d": _simple(lambda a, x: F.max_pool2d(x, a["kernel_size"], a.get("stride"), a.get("padding", 0),
                                                    ceil_mode=a.get("ceil_mode", False))),
    "avg_pool1d": _simple(lambda a, x: F.avg_pool1d(x, a["kernel_size"], a.get("stride"))),
    "avg_pool2d": _simple(lambda a, x: F.avg_pool2d(x, a["kernel_size"], a.get("stride"))),
    "adaptive_avg_pool1d": _simple(lambda a, x: F.adaptive_avg_pool1d(x, a["output_size"])),
    "adaptive_avg_pool2d": _simple(lambda a, x: F.adaptive_avg_pool2d(x, a["output_size"])),
    "add": _simple(lambda a, x, y: x.add_(y) if a.get("inplace") else x + y),
    "sub": _simple(lambda a, x, y: x - y),
    "mul": _simple(lambda a, x, y: x.mul_(y) if a.get("inplace") else x * y),
    "div": _simple(lambda a, x, y: x.div_(y) if a.get("inplace") else x / y),
    "topk": _simple(lambda a, x: torch.topk(x, a["k"], dim=a.get("dim", -1))),
    "index": _simple(lambda a, x, *idx: x[(slice(None),) * a.get("dim", 0) + tuple(idx)]),
    "index_add": _simple(lambda a, x, i, src: x.index_add_(a.get("dim", 0), i, src)),
    "add_scalar": _simple(lambda a, x: x + a["value"]),
    "sub_scalar": _simple(lambda a, x: x - a["value"]),
    "rsub_scalar": _simple(lambda a, x: a["value"] - x),
    "mul_scalar": _simple(lambda a, x: x.mul_(a["value"]) if a.get("inplace") else x * a["value"]),
    "div_scalar": _simple(lambda a, x: x / a["value"]),
    "pow_scalar": _simple(lambda a, x: torch.pow(x, a["exponent"])),
    "rsqrt": _simple(lambda a, x: torch.rsqrt(x)),
    "exp": _simple(lambda a, x: torch.exp(x)),
    "abs": _simple(lambda a, x: torch.abs(x)),
    "neg": _simple(lambda a, x: -x),
    "where": _simple(lambda a, c, x, y: torch.where(c, x, y)),
    "masked_fill": _simple(lambda a, x, m: x.masked_fill_(m, a["value"]) if a.get("inplace")
                           else x.masked_fill(m, a["value"])),
    "to_copy": _simple(lambda a, x: x.to(getattr(torch, a["dtype"]))),
    "view": _simple(lambda a, x: x.view(a["shape"])),
    "reshape": _simple(lambda a, x: x.reshape(a["shape"])),
    "flatten": _simple(lambda a, x: torch.flatten(x, a.get("start_dim", 0), a.get("end_dim", -1))),
    "unflatten": _simple(lambda a, x: x.unflatten(a["dim"], a["sizes"])),
    "permute": _simple(lambda a, x: x.permute(*a["dims"])),
    "transpose": _simple(lambda a, x: x.transpose(a["dim0"], a["dim1"])),
    "contiguous": _simple(lambda a, x: x.contiguous()),
    "clone": _simple(lambda a, x: x.clone()),
    "expand": _simple(lambda a, x: x.expand(*a["sizes"])),
    "select": _simple(lambda a, x: x.select(a["dim"], a["index"])),
    "slice": _simple(lambda a, x: x.narrow(a["dim"], 0, x.shape[a["dim"]])[
        (slice(None),) * a["dim"] + (slice(a.get("start"), a.get("end"), a.get("step", 1)),)]),
    "unsqueeze": _simple(lambda a, x: x.unsqueeze(a["dim"])),
    "squeeze": _simple(lambda a, x: x.squeeze(a["dim"])),
    "chunk": _simple(lambda a, x: x.chunk(a["chunks"], a.get("dim", 0))),
    "split": _simple(lambda a, x: x.split(a["sizes"], a.get("dim", 0))),
    "unbind": _simple(lambda a, x: x.unbind(a.get("dim", 0))),
    "clamp_min": _simple(lambda a, x: x.clamp_min(a["min"])),
    "logical_not": _simple(lambda a, x: ~x),
    "pad": _simple(lambda a, x: F.pad(x, a["pads"], value=a.get("value", 0.0))),
    "cat": _simple(lambda a, *xs: torch.cat(xs, a.get("dim", 0))),
    "stack": _simple(lambda a, *xs: torch.stack(xs, a.get("dim", 0))),
    "arange": _simple(lambda a: torch.arange(a["end"])),
    "full": _simple(lambda a, *xs: torch.zeros_like(xs[0], dtype=getattr(torch, a["dtype"])) if xs
                    else torch.full(a["shape"], a["value"])),
    "sum": _simple(lambda a, x: x.sum(dim=a["dims"], keepdim=a.get("keepdim", False)) if a.get("dims") else x.sum()),
    "mean": _simple(lambda a, x: x.mean(dim=a["dims"], keepdim=a.get("keepdim", False)) if a.get("dims") else x.mean()),
    "multi_head_attention": _mha,
    "nll_loss": _simple(lambda a, x, t: F.nll_loss(x, t)),
    "cross_entropy": _simple(lambda a, x, t: F.cross_entropy(x, t)),
    "mse_loss": _simple(lambda a, x, t: F.mse_loss(x, t)),
    "l1_loss": _simple(lambda a, x, t: F.l1_loss(x, t)),
    "embedding": lambda a, i: (lambda m: (m, lambda: m(i)))(nn.Embedding(a["num_embeddings"], a["embedding_dim"])),
}
for _act in ACTIVATIONS:
    IMPLS[_act] = _simple(_inplace_act(_act))


def make_input(spec):
    dtype = getattr(torch, spec["dtype"])
    shape = spec["shape"]
    if spec["permute"]:
        inverse = [spec["permute"].index(i) for i in range(len(shape))]
        base = [shape[inverse[i]] for i in range(len(shape))]
    else:
        base = shape
    kind = spec["kind"]
    if kind.startswith("index"):
        t = torch.randint(0, int(kind[5:]), base)
    elif kind == "mask":
        t = torch.rand(base) > 0.5
    elif kind == "positive":
        t = (torch.rand(base) + 0.5).to(dtype)
    else:
        t = torch.randn(base).to(dtype)
    if spec["permute"]:
        t = t.permute(*spec["permute"])
    assert list(t.shape) == shape, (t.shape, shape)
    return t


def measure(c):
    torch.manual_seed(0)
    leaves = [make_input(s) for s in c["inputs"]]
    for t, s in zip(leaves, c["inputs"]):
        t.requires_grad_(s["requires_grad"])
    # Inputs that need a gradient are made non-leaf (as activations are) so in-place ops work.
    xs = [(t.clone() if not t.is_contiguous() else t * 1) if s["requires_grad"] else t
          for t, s in zip(leaves, c["inputs"])]
    for x, t, s in zip(xs, leaves, c["inputs"]):
        if s["permute"] and s["requires_grad"]:
            assert x.stride() == t.stride(), "clone must keep the permuted layout"
    args = [xs[i] for i in c["args"]]
    module, run = IMPLS[c["op"]](c["attrs"], *args)
    params = 0
    if module is not None:
        for p in module.parameters():
            p.requires_grad_(c["params_trainable"])
        params = sum(p.numel() for p in module.parameters())
        excluded = {storage_of(p)[0] for p in list(module.parameters()) + list(module.buffers())}
    else:
        excluded = set()
    input_ptrs = {storage_of(x)[0]: i for i, x in enumerate(xs)}
    kept = {}

    def pack(t):
        ptr, nbytes = storage_of(t)
        if ptr not in excluded:
            kept[ptr] = max(kept.get(ptr, 0), nbytes)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled="autocast" in c):
        out = run()
    first = out[0] if isinstance(out, (tuple, list)) else out
    saved_inputs = sorted({input_ptrs[p] for p in kept if p in input_ptrs})
    # Empty storages (eval-mode batch norm keeps two) share a null pointer: count real ones.
    new = [b for p, b in kept.items() if p not in input_ptrs and b > 0]
    return {"output_shape": list(first.shape), "output_dtype": str(first.dtype).replace("torch.", ""),
            "saved_inputs": saved_inputs, "saved_new_bytes": sum(new), "saved_new_count": len(new),
            "parameters": params}


def measure_all():
    out = []
    for c in CASES:
        entry = {k: c[k] for k in ("id", "op", "attrs", "inputs", "args", "params_trainable",
                                   "autocast") if k in c}
        entry["expect"] = measure(c)
        out.append(entry)
    ids = [c["id"] for c in out]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return {"torch_version": torch.__version__, "device": "cpu", "cases": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true", help="regenerate tests/data/op_cases.json")
    ap.add_argument("--check", action="store_true", help="fail if the recorded file is stale")
    args = ap.parse_args()
    data = measure_all()
    if args.write:
        with open(OUT, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        print(f"wrote {len(data['cases'])} cases to {os.path.relpath(OUT)}")
    if args.check:
        with open(OUT) as f:
            recorded = json.load(f)
        if recorded["torch_version"] != data["torch_version"]:
            print(f"recorded with torch {recorded['torch_version']}, running {data['torch_version']}: "
                  "differences are expected across versions")
        stale = [c["id"] for c, r in zip(data["cases"], recorded["cases"]) if c != r]
        if len(data["cases"]) != len(recorded["cases"]):
            stale.append("case count")
        for s in stale:
            print(f"  STALE {s}")
        print(f"op cases: {len(data['cases']) - len(stale)}/{len(data['cases'])} measured as recorded")
        sys.exit(1 if stale else 0)


if __name__ == "__main__":
    main()
