// Normalization: batch_norm (training and eval), frozen_batch_norm, layer_norm, group_norm.
//
// autograd keeps the norm's input and its statistics (mean and rstd, or save_mean and
// save_invstd), never its output (derivatives.yaml native_batch_norm, native_layer_norm,
// native_group_norm). Statistics are fp32 on CUDA for fp16/bf16 inputs (acc_type); the CPU
// build of PyTorch 1.13 keeps them in the input dtype.
#include <fmt/format.h>

#include "base/size_math.h"
#include "graph/builder.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

DType stats_dtype(const OpCall& call, DType input) {
  return call.on_cuda() ? accumulate_dtype(input) : input;
}

// ---- batch_norm ---------------------------------------------------------------------------

struct BatchNormInputs {
  int weight = -1, bias = -1, running_mean = -1, running_var = -1;
};

BatchNormInputs batch_norm_inputs(const Attrs& attrs) {
  BatchNormInputs idx;
  int next = 1;
  if (attrs.get_bool("affine")) {
    idx.weight = next++;
    idx.bias = next++;
  }
  if (attrs.get_bool("track_running_stats")) {
    idx.running_mean = next++;
    idx.running_var = next++;
  }
  return idx;
}

Result<std::vector<ParamSpec>> batch_norm_params(const OpCall& call) {
  TF_RETURN_IF_ERROR(expect_rank(call, 0, 2, 5, "input (N, C, ...)"));
  const int64_t c = call.in(0).shape[1];
  std::vector<ParamSpec> p;
  if (call.attrs.get_bool("affine")) {
    p.push_back({"weight", {c}});
    p.push_back({"bias", {c}});
  }
  if (call.attrs.get_bool("track_running_stats")) {
    p.push_back({"running_mean", {c}, true});
    p.push_back({"running_var", {c}, true});
    p.push_back({"num_batches_tracked", {}, true, DType::kInt64});
  }
  return p;
}

bool uses_batch_stats(const Attrs& attrs) {
  return attrs.get_bool("training") || !attrs.get_bool("track_running_stats");
}

Status batch_norm_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  const Value& x = call.in(0);
  const int64_t c = uses_batch_stats(call.attrs) ? x.shape[1] : 0;
  out.push_back(OutputSpec::fresh(x.shape, x.dtype));
  out.push_back(OutputSpec::aux({c}, stats_dtype(call, x.dtype)));  // save_mean
  out.push_back(OutputSpec::aux({c}, stats_dtype(call, x.dtype)));  // save_invstd
  return {};
}

SavedList batch_norm_saved(const OpCall& call) {
  const BatchNormInputs idx = batch_norm_inputs(call.attrs);
  SavedList saved{saved_input(0)};
  if (idx.weight >= 0) saved.push_back(saved_input(idx.weight));
  if (idx.running_mean >= 0) {
    saved.push_back(saved_input(idx.running_mean));
    saved.push_back(saved_input(idx.running_var));
  }
  saved.push_back(saved_output(1));
  saved.push_back(saved_output(2));
  return saved;
}

// ---- frozen_batch_norm (torchvision.ops.FrozenBatchNorm2d) ---------------------------------

std::vector<ValueId> frozen_batch_norm_decompose(GraphBuilder& b, std::span<const ValueId> in,
                                                 const Attrs& attrs) {
  if (b.shape(in[0]).size() != 4) {
    b.fail(invalid_argument(
        fmt::format("frozen_batch_norm needs a 4-D input, got {}", shape_string(b.shape(in[0])))));
    return {kNone};
  }
  // scale = w * (rv + eps).rsqrt(); bias = b - rm * scale; y = x * scale + bias
  auto as_4d = [&](ValueId t) { return b.call1("reshape", {t}, {{"shape", Dims{1, -1, 1, 1}}}); };
  const ValueId w = as_4d(in[1]);
  const ValueId bias = as_4d(in[2]);
  const ValueId rv = as_4d(in[4]);
  const ValueId rm = as_4d(in[3]);
  const ValueId rv_eps = b.call1("add_scalar", {rv}, {{"value", attrs.get_float("eps")}});
  const ValueId scale = b.call1("mul", {w, b.call1("rsqrt", {rv_eps})});
  const ValueId shift = b.call1("sub", {bias, b.call1("mul", {rm, scale})});
  return {b.call1("add", {b.call1("mul", {in[0], scale}), shift})};
}

// ---- layer_norm ---------------------------------------------------------------------------

Result<std::vector<ParamSpec>> layer_norm_params(const OpCall& call) {
  const Dims& normalized = call.attrs.get_ints("normalized_shape");
  std::vector<ParamSpec> p;
  if (call.attrs.get_bool("elementwise_affine")) {
    p.push_back({"weight", normalized});
    if (call.attrs.get_bool("bias")) p.push_back({"bias", normalized});
  }
  return p;
}

Status layer_norm_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  const Value& x = call.in(0);
  const Dims& normalized = call.attrs.get_ints("normalized_shape");
  const bool matches = !normalized.empty() && normalized.size() <= x.shape.size() &&
                       std::equal(normalized.begin(), normalized.end(),
                                  x.shape.end() - static_cast<int64_t>(normalized.size()));
  if (!matches) {
    return invalid_argument(fmt::format("normalized_shape {} does not match the end of input {}",
                                        shape_string(normalized), shape_string(x.shape)));
  }
  Dims stats = x.shape;
  for (size_t i = x.shape.size() - normalized.size(); i < x.shape.size(); ++i) stats[i] = 1;
  out.push_back(OutputSpec::fresh(x.shape, x.dtype));
  out.push_back(OutputSpec::aux(stats, stats_dtype(call, x.dtype)));  // mean
  out.push_back(OutputSpec::aux(stats, stats_dtype(call, x.dtype)));  // rstd
  return {};
}

// ---- group_norm ---------------------------------------------------------------------------

Result<std::vector<ParamSpec>> group_norm_params(const OpCall& call) {
  TF_RETURN_IF_ERROR(expect_rank(call, 0, 2, 8, "input (N, C, ...)"));
  const int64_t c = call.in(0).shape[1];
  if (!call.attrs.get_bool("affine")) return std::vector<ParamSpec>{};
  return std::vector<ParamSpec>{{"weight", {c}}, {"bias", {c}}};
}

Status group_norm_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  const Value& x = call.in(0);
  const int64_t groups = call.attrs.get_int("num_groups");
  if (groups < 1 || x.shape[1] % groups != 0) {
    return invalid_argument(
        fmt::format("num_groups={} must divide the {} channels", groups, x.shape[1]));
  }
  out.push_back(OutputSpec::fresh(x.shape, x.dtype));
  out.push_back(OutputSpec::aux({x.shape[0], groups}, x.dtype));  // mean
  out.push_back(OutputSpec::aux({x.shape[0], groups}, x.dtype));  // rstd
  // group_norm runs on input.contiguous(): a non-contiguous input is copied, and the copy is
  // what native_group_norm keeps.
  if (!is_contiguous(x.shape, x.strides)) out.push_back(OutputSpec::aux(x.shape, x.dtype));
  return {};
}

SavedList group_norm_saved(const OpCall& call) {
  const Value& x = call.in(0);
  SavedList saved{is_contiguous(x.shape, x.strides) ? saved_input(0) : saved_output(3)};
  if (call.attrs.get_bool("affine")) saved.push_back(saved_input(1));
  saved.push_back(saved_output(1));
  saved.push_back(saved_output(2));
  return saved;
}

// Batch and group norm kernels reduce the statistics in one pass over the input and normalise
// it in another: the input is read twice, the parameters once.
int64_t two_pass_read_bytes(const OpCall& call, const Dims&) {
  int64_t bytes = 0;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    bytes += value_bytes(call.in(i)) * (i == 0 ? 2 : 1);
  }
  return bytes;
}

}  // namespace

void add_norm_ops(std::vector<OpSchema>& ops) {
  OpSchema bn;
  bn.name = "batch_norm";
  bn.family = "norm";
  bn.doc = "batch normalization (nn.BatchNorm1d/2d); keeps input and per-channel statistics";
  bn.attrs = {{"training", AttrKind::kBool, AttrValue{true}, "batch statistics (train mode)"},
              {"eps", AttrKind::kFloat, AttrValue{1e-5}, "added to the variance"},
              {"momentum", AttrKind::kFloat, AttrValue{0.1}, "running-stat update rate"},
              {"affine", AttrKind::kBool, AttrValue{true}, "learnable weight and bias"},
              {"track_running_stats", AttrKind::kBool, AttrValue{true}, "keep running stats"}};
  bn.params = batch_norm_params;
  bn.infer = batch_norm_infer;
  bn.saved = batch_norm_saved;
  bn.read_bytes = two_pass_read_bytes;
  bn.workspace = no_workspace;
  ops.push_back(std::move(bn));

  OpSchema frozen;
  frozen.name = "frozen_batch_norm";
  frozen.family = "norm";
  frozen.doc =
      "torchvision FrozenBatchNorm2d: x * scale + shift from fixed buffers; keeps the [C] scale";
  frozen.attrs = {{"eps", AttrKind::kFloat, AttrValue{1e-5}, "added to the variance"}};
  frozen.params = [](const OpCall& call) -> Result<std::vector<ParamSpec>> {
    TF_RETURN_IF_ERROR(expect_rank(call, 0, 4, 4, "input (N, C, H, W)"));
    const int64_t c = call.in(0).shape[1];
    return std::vector<ParamSpec>{{"weight", {c}, true},
                                  {"bias", {c}, true},
                                  {"running_mean", {c}, true},
                                  {"running_var", {c}, true}};
  };
  frozen.decompose = frozen_batch_norm_decompose;
  ops.push_back(std::move(frozen));

  OpSchema ln;
  ln.name = "layer_norm";
  ln.family = "norm";
  ln.doc = "layer normalization (nn.LayerNorm); keeps input, weight, bias, mean and rstd";
  ln.attrs = {{"normalized_shape", AttrKind::kInts, std::nullopt, "trailing dims to normalize"},
              {"eps", AttrKind::kFloat, AttrValue{1e-5}, "added to the variance"},
              {"elementwise_affine", AttrKind::kBool, AttrValue{true}, "learnable weight"},
              {"bias", AttrKind::kBool, AttrValue{true}, "learnable bias"}};
  ln.autocast = Autocast::kFp32;
  ln.cpu_autocast = Autocast::kUnchanged;  // not on the CPU's fp32 list
  ln.params = layer_norm_params;
  ln.infer = layer_norm_infer;
  ln.saved = [](const OpCall& call) {
    SavedList saved{saved_input(0)};
    for (size_t i = 1; i < call.inputs.size(); ++i)
      saved.push_back(saved_input(static_cast<int>(i)));
    saved.push_back(saved_output(1));
    saved.push_back(saved_output(2));
    return saved;
  };
  // The kernel reads input.contiguous(): a transient copy when the input is not contiguous,
  // made before the output, mean and rstd (layer_norm_cuda's expect_contiguous).
  ln.workspace_first = true;
  ln.dense_grad = DenseGrad::kCopyLast;
  ln.workspace = [](const OpCall& call) -> int64_t {
    const Value& x = call.in(0);
    if (is_contiguous(x.shape, x.strides)) return 0;
    return checked_numel(x.shape).value_or(0) * dtype_bytes(x.dtype);
  };
  // The backward reads the saved input the same way: its copy comes before dX, dgamma and
  // dbeta and goes when the kernel returns. An elementwise op's output takes its first
  // operand's layout, so a residual sum over a transposed tensor (nn.MultiheadAttention's
  // batch_first output, ACT's permuted VAE input) stays transposed into the next LayerNorm:
  // the H100 recordings of ViT-B/16 and ACT make this copy in the backward of each.
  ln.backward = [](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    const Value& x = call.in(0);
    if (!is_contiguous(x.shape, x.strides)) {
      spec.input_copy_bytes = checked_numel(x.shape).value_or(0) * dtype_bytes(x.dtype);
    }
    return spec;
  };
  ops.push_back(std::move(ln));

  OpSchema gn;
  gn.name = "group_norm";
  gn.family = "norm";
  gn.doc = "group normalization (nn.GroupNorm); keeps input, weight, mean and rstd";
  gn.attrs = {{"num_groups", AttrKind::kInt, std::nullopt, "groups of channels"},
              {"eps", AttrKind::kFloat, AttrValue{1e-5}, "added to the variance"},
              {"affine", AttrKind::kBool, AttrValue{true}, "learnable weight and bias"}};
  gn.autocast = Autocast::kFp32;
  gn.cpu_autocast = Autocast::kUnchanged;
  gn.params = group_norm_params;
  gn.infer = group_norm_infer;
  gn.saved = group_norm_saved;
  gn.read_bytes = two_pass_read_bytes;
  gn.workspace = no_workspace;
  // group_norm_kernel.cu's backward sums dY x X and dY over each (sample, channel) in a block of
  // its own (ComputeInternalGradientsCUDAKernel): N x C blocks of one warp while the positions
  // are fewer than 512, else of 512 threads. One position per channel takes another path.
  gn.backward_grid = [](const OpCall& call) {
    const Dims& x = call.in(0).shape;
    const int64_t positions = checked_numel(Dims(x.begin() + 2, x.end())).value_or(0);
    if (!call.on_cuda() || positions <= 1) return KernelGrid{};
    return KernelGrid{x[0] * x[1], positions < 512 ? 32 : 512};
  };
  ops.push_back(std::move(gn));
}

}  // namespace trainfit
