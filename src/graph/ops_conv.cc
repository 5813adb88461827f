// Convolutions: conv1d, conv2d, conv_transpose1d, conv_transpose2d.
//
// autograd: convolution's backward formula covers input, weight and bias at once, so its
// node always keeps both the input and the weight (derivatives.yaml `convolution`), even for
// a first layer whose input needs no gradient.
#include <fmt/format.h>

#include "base/size_math.h"
#include "graph/device_rules.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

struct ConvGeometry {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t groups = 1;
  Dims kernel, stride, padding, dilation, output_padding;
};

Result<ConvGeometry> conv_geometry(const OpCall& call, size_t spatial, bool transposed) {
  TF_RETURN_IF_ERROR(expect_rank(call, 0, spatial + 2, spatial + 2, "input (N, C, spatial...)"));
  ConvGeometry g;
  g.in_channels = call.in(0).shape[1];
  g.out_channels = call.attrs.get_int("out_channels");
  g.groups = call.attrs.get_int("groups");
  TF_ASSIGN_OR_RETURN(g.kernel, spatial_attr(call.attrs, "kernel_size", spatial));
  TF_ASSIGN_OR_RETURN(g.stride, spatial_attr(call.attrs, "stride", spatial));
  TF_ASSIGN_OR_RETURN(g.padding, spatial_attr(call.attrs, "padding", spatial));
  TF_ASSIGN_OR_RETURN(g.dilation, spatial_attr(call.attrs, "dilation", spatial));
  if (transposed) {
    TF_ASSIGN_OR_RETURN(g.output_padding, spatial_attr(call.attrs, "output_padding", spatial));
  }
  if (g.groups < 1 || g.in_channels % g.groups != 0 || g.out_channels % g.groups != 0) {
    return invalid_argument(fmt::format("groups={} must divide in_channels={} and out_channels={}",
                                        g.groups, g.in_channels, g.out_channels));
  }
  if (g.out_channels < 1) return invalid_argument("out_channels must be at least 1");
  for (size_t i = 0; i < spatial; ++i) {
    if (g.kernel[i] < 1 || g.stride[i] < 1 || g.dilation[i] < 1 || g.padding[i] < 0) {
      return invalid_argument("kernel_size, stride and dilation must be positive, padding >= 0");
    }
    if (transposed && g.output_padding[i] >= std::max(g.stride[i], g.dilation[i])) {
      return invalid_argument("output_padding must be smaller than stride or dilation");
    }
  }
  return g;
}

Result<std::vector<ParamSpec>> conv_params(const OpCall& call, size_t spatial, bool transposed) {
  TF_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(call, spatial, transposed));
  Dims weight = transposed ? Dims{g.in_channels, g.out_channels / g.groups}
                           : Dims{g.out_channels, g.in_channels / g.groups};
  weight.insert(weight.end(), g.kernel.begin(), g.kernel.end());
  std::vector<ParamSpec> out{{"weight", weight}};
  if (call.attrs.get_bool("bias")) out.push_back({"bias", {g.out_channels}});
  return out;
}

Status conv_infer(const OpCall& call, std::vector<OutputSpec>& out, size_t spatial,
                  bool transposed) {
  TF_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(call, spatial, transposed));
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  const Dims& in = call.in(0).shape;
  Dims shape{in[0], g.out_channels};
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t size = in[2 + i];
    const int64_t effective_kernel = g.dilation[i] * (g.kernel[i] - 1) + 1;
    int64_t o = 0;
    if (transposed) {
      const auto grown = checked_mul(size - 1, g.stride[i]);
      if (!grown) return out_of_range("transposed convolution output overflows int64");
      o = *grown - 2 * g.padding[i] + effective_kernel + g.output_padding[i];
    } else {
      const auto padded = checked_add(size, 2 * g.padding[i]);
      if (!padded) return out_of_range("convolution input overflows int64");
      o = *padded < effective_kernel ? 0 : (*padded - effective_kernel) / g.stride[i] + 1;
    }
    if (o < 1) {
      return invalid_argument(
          fmt::format("input {} is too small for kernel {}, stride {}, padding {}, dilation {}",
                      shape_string(Dims(in.begin() + 1, in.end())), shape_string(g.kernel),
                      shape_string(g.stride), shape_string(g.padding), shape_string(g.dilation)),
          "use a larger input size");
    }
    shape.push_back(o);
  }
  out.push_back(OutputSpec::fresh(std::move(shape), call.in(0).dtype));
  return {};
}

// The convolution cuDNN runs for the call: for a transposed one, the convolution whose input
// gradient it is (its output is that convolution's input).
std::optional<ConvProblem> cudnn_problem(const OpCall& call, size_t spatial, bool transposed) {
  std::vector<OutputSpec> out;
  const Result<ConvGeometry> g = conv_geometry(call, spatial, transposed);
  if (!g.ok() || !conv_infer(call, out, spatial, transposed).ok()) return std::nullopt;
  const Dims& in = call.in(0).shape;
  const Dims& o = out.front().shape;
  ConvProblem p;
  p.batch = in[0];
  p.in_channels = transposed ? g->out_channels : g->in_channels;
  p.out_channels = transposed ? g->in_channels : g->out_channels;
  p.groups = g->groups;
  p.in_spatial = Dims((transposed ? o : in).begin() + 2, (transposed ? o : in).end());
  p.out_spatial = Dims((transposed ? in : o).begin() + 2, (transposed ? in : o).end());
  p.kernel = g->kernel;
  p.stride = g->stride;
  p.padding = g->padding;
  p.dilation = g->dilation;
  p.itemsize = dtype_bytes(call.in(0).dtype);
  p.dtype = call.in(0).dtype;
  p.memory_format = call.memory_format;
  return p;
}

OpSchema conv_schema(std::string_view name, std::string_view doc, size_t spatial, bool transposed) {
  OpSchema s;
  s.name = name;
  s.family = "conv";
  s.doc = doc;
  s.attrs = {
      {"out_channels", AttrKind::kInt, std::nullopt, "output channels"},
      {"kernel_size", AttrKind::kInts, std::nullopt, "kernel size (one int or one per dim)"},
      {"stride", AttrKind::kInts, AttrValue{int64_t{1}}, "stride"},
      {"padding", AttrKind::kInts, AttrValue{int64_t{0}}, "zero padding on both sides"},
      {"dilation", AttrKind::kInts, AttrValue{int64_t{1}}, "spacing between kernel taps"},
      {"groups", AttrKind::kInt, AttrValue{int64_t{1}}, "blocked connections"},
      {"bias", AttrKind::kBool, AttrValue{true}, "learnable bias"},
  };
  if (transposed) {
    s.attrs.push_back({"output_padding", AttrKind::kInts, AttrValue{int64_t{0}},
                       "extra size on one side of the output"});
  }
  s.autocast = Autocast::kLower;
  // The CPU lists lower the convolutions but not the transposed ones.
  if (transposed) s.cpu_autocast = Autocast::kUnchanged;
  s.params = [spatial, transposed](const OpCall& c) { return conv_params(c, spatial, transposed); };
  s.infer = [spatial, transposed](const OpCall& c, std::vector<OutputSpec>& out) {
    return conv_infer(c, out, spatial, transposed);
  };
  s.saved = [](const OpCall&) { return SavedList{saved_input(0), saved_input(1)}; };
  // Implicit GEMM. A convolution: M = N x output positions, N = Cout/groups, K = Cin/groups x
  // kernel taps, one product per group. A transposed one is the input gradient of a
  // convolution: M = N x input positions, N = Cout/groups x taps, K = Cin/groups.
  s.gemm = [transposed](const OpCall& c, const Dims& out) {
    const Dims& x = c.in(0).shape;
    const Dims& w = c.in(1).shape;
    const int64_t groups = c.attrs.get_int("groups");
    const int64_t taps = checked_numel(Dims(w.begin() + 2, w.end())).value_or(0);
    const Dims& positions = transposed ? x : out;
    GemmShape g;
    g.batch = groups;
    g.m = positions[0] * checked_numel(Dims(positions.begin() + 2, positions.end())).value_or(0);
    g.n = transposed ? w[1] * taps : w[0] / groups;
    g.k = transposed ? w[0] / groups : w[1] * taps;
    return g;
  };
  s.uses_cudnn = true;
  s.dense_grad = DenseGrad::kCudnnCopies;
  // A transposed convolution's forward is backward-data, whose operand is the gradient: its
  // channels are the output's, and no recording shows it gathered.
  if (!transposed) {
    s.gathers_im2col = [](const OpCall& c, int64_t element_bytes) {
      return cudnn_gathers_im2col(c.in(1).shape[1], element_bytes);
    };
  }
  // Note [cuDNN convolution workspaces] (device_rules.h). A transposed convolution's forward is
  // backward-data, its input gradient a forward convolution.
  s.workspace = [spatial, transposed](const OpCall& call) -> int64_t {
    if (!call.on_cuda()) return 0;
    const std::optional<ConvProblem> p = cudnn_problem(call, spatial, transposed);
    if (!p) return 0;
    const ConvWorkspaces ws = cudnn_conv_workspaces(*p, call.target.sm);
    return transposed ? ws.backward_data : ws.forward;
  };
  s.workspace_figure = [spatial, transposed](const OpCall& call) {
    const std::optional<ConvProblem> p =
        call.on_cuda() ? cudnn_problem(call, spatial, transposed) : std::nullopt;
    if (!p) return WorkspaceFigure{};
    const ConvWorkspaces ws = cudnn_conv_workspaces(*p, call.target.sm);
    const size_t direction = transposed ? 1 : 0;
    return WorkspaceFigure{ws.source[direction], ws.bound[direction]};
  };
  // In benchmark mode each direction searches its own plans; a transposed convolution's forward
  // is backward-data.
  const auto search = [](const ConvProblem& p, int direction, const OpCall& call) {
    const ConvPlanSearch s = cudnn_benchmark_search(p, direction, call.target.sm);
    return PlanSearch{cudnn_problem_key(p, direction), s.trial_bytes, s.chosen_bytes, s.measured};
  };
  s.plan_search = [spatial, transposed, search](const OpCall& call) -> std::optional<PlanSearch> {
    if (!call.on_cuda()) return std::nullopt;
    const std::optional<ConvProblem> p = cudnn_problem(call, spatial, transposed);
    if (!p) return std::nullopt;
    return search(*p, transposed ? 1 : 0, call);
  };
  s.backward = [spatial, transposed, search](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    const std::optional<ConvProblem> p =
        call.on_cuda() ? cudnn_problem(call, spatial, transposed) : std::nullopt;
    if (!p) return spec;
    for (GradRule& rule : spec.grads) {
      if (rule.input == 0) rule.plan_search = search(*p, transposed ? 0 : 1, call);
      if (rule.input == 1) rule.plan_search = search(*p, 2, call);
    }
    const ConvWorkspaces ws = cudnn_conv_workspaces(*p, call.target.sm);
    for (GradRule& rule : spec.grads) {
      const int direction = rule.input == 0 ? (transposed ? 0 : 1) : rule.input == 1 ? 2 : -1;
      if (direction < 0) continue;
      const auto d = static_cast<size_t>(direction);
      const int64_t bytes = ws.bytes(direction);
      // A workspace of none whose bound is some is made at the bound's replay only.
      if (bytes > 0 || ws.bound[d] > 0) rule.workspace = {bytes};
      rule.workspace_source = ws.source[d];
      rule.workspace_bound_bytes = ws.bound[d];
    }
    return spec;
  };
  return s;
}

}  // namespace

void add_conv_ops(std::vector<OpSchema>& ops) {
  ops.push_back(
      conv_schema("conv1d", "1-D convolution (nn.Conv1d); keeps input and weight", 1, false));
  ops.push_back(
      conv_schema("conv2d", "2-D convolution (nn.Conv2d); keeps input and weight", 2, false));
  ops.push_back(conv_schema("conv_transpose1d",
                            "1-D transposed convolution (nn.ConvTranspose1d); keeps input and "
                            "weight",
                            1, true));
  ops.push_back(conv_schema("conv_transpose2d",
                            "2-D transposed convolution (nn.ConvTranspose2d); keeps input and "
                            "weight",
                            2, true));
}

}  // namespace trainfit
