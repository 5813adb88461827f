// Pooling: max_pool1d/2d, avg_pool1d/2d, adaptive_avg_pool1d/2d. 1-D pools run as their 2-D
// kernels on an unsqueezed view, so they keep the same tensors.
//
// max pooling returns int64 indices of every output element and keeps them with its input
// (derivatives.yaml max_pool2d_with_indices). CUDA always computes the indices; the CPU build
// skips them when the input needs no gradient (Pooling.cpp max_pool2d/max_pool1d).
// Average pooling keeps its input. adaptive_avg_pool to 1x1 is a mean over the spatial dims,
// which keeps its input on PyTorch 1.13 (mean.dim saves self) and nothing on 2.x.
#include <fmt/format.h>

#include "base/size_math.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

struct PoolGeometry {
  Dims kernel, stride, padding, dilation;
  bool ceil_mode = false;
};

Result<PoolGeometry> pool_geometry(const OpCall& call, size_t spatial, bool max_pool) {
  PoolGeometry g;
  TF_ASSIGN_OR_RETURN(g.kernel, spatial_attr(call.attrs, "kernel_size", spatial));
  const Dims& stride = call.attrs.get_ints("stride");
  if (stride.empty()) {
    g.stride = g.kernel;  // PyTorch's default stride is the kernel size
  } else {
    TF_ASSIGN_OR_RETURN(g.stride, spatial_attr(call.attrs, "stride", spatial));
  }
  TF_ASSIGN_OR_RETURN(g.padding, spatial_attr(call.attrs, "padding", spatial));
  if (max_pool) {
    TF_ASSIGN_OR_RETURN(g.dilation, spatial_attr(call.attrs, "dilation", spatial));
  } else {
    g.dilation = Dims(spatial, 1);
  }
  g.ceil_mode = call.attrs.get_bool("ceil_mode");
  for (size_t i = 0; i < spatial; ++i) {
    if (g.kernel[i] < 1 || g.stride[i] < 1 || g.dilation[i] < 1 || g.padding[i] < 0) {
      return invalid_argument("kernel_size, stride and dilation must be positive, padding >= 0");
    }
    if (g.padding[i] * 2 > g.kernel[i]) {
      return invalid_argument(fmt::format("padding {} is more than half the kernel size {}",
                                          g.padding[i], g.kernel[i]));
    }
  }
  return g;
}

// pooling_output_shape (Pool.h): floor or ceil, and a window may not start in the padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

Result<Dims> pool_output(const OpCall& call, size_t spatial, bool max_pool) {
  TF_RETURN_IF_ERROR(expect_rank(call, 0, spatial + 2, spatial + 2, "input (N, C, spatial...)"));
  TF_ASSIGN_OR_RETURN(PoolGeometry g, pool_geometry(call, spatial, max_pool));
  const Dims& in = call.in(0).shape;
  Dims shape{in[0], in[1]};
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t o =
        pooled_size(in[2 + i], g.kernel[i], g.padding[i], g.stride[i], g.dilation[i], g.ceil_mode);
    if (o < 1) {
      return invalid_argument(fmt::format("input {} is too small for a {} pool with stride {}",
                                          shape_string(Dims(in.begin() + 1, in.end())),
                                          shape_string(g.kernel), shape_string(g.stride)),
                              "use a larger input size");
    }
    shape.push_back(o);
  }
  return shape;
}

bool computes_indices(const OpCall& call) {
  return call.on_cuda() || call.requires_grad(0);
}

OpSchema pool_schema(std::string_view name, std::string_view doc, size_t spatial, bool max_pool) {
  OpSchema s;
  s.name = name;
  s.family = "pool";
  s.doc = doc;
  s.attrs = {{"kernel_size", AttrKind::kInts, std::nullopt, "window size"},
             {"stride", AttrKind::kInts, AttrValue{Dims{}}, "step (default: kernel_size)"},
             {"padding", AttrKind::kInts, AttrValue{int64_t{0}}, "implicit padding"},
             {"ceil_mode", AttrKind::kBool, AttrValue{false}, "ceil instead of floor"}};
  if (max_pool) {
    s.attrs.push_back({"dilation", AttrKind::kInts, AttrValue{int64_t{1}}, "window spacing"});
  } else {
    s.attrs.push_back(
        {"count_include_pad", AttrKind::kBool, AttrValue{true}, "padding counts in the average"});
  }
  s.infer = [spatial, max_pool](const OpCall& call, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(expect_floating(call, 0));
    TF_ASSIGN_OR_RETURN(Dims shape, pool_output(call, spatial, max_pool));
    out.push_back(OutputSpec::fresh(shape, call.in(0).dtype));
    if (max_pool && computes_indices(call)) out.push_back(OutputSpec::aux(shape, DType::kInt64));
    return Status();
  };
  s.saved = [max_pool](const OpCall&) {
    if (max_pool) return SavedList{saved_input(0), saved_output(1)};
    return SavedList{saved_input(0)};
  };
  s.workspace = no_workspace;
  return s;
}

OpSchema adaptive_schema(std::string_view name, std::string_view doc, size_t spatial) {
  OpSchema s;
  s.name = name;
  s.family = "pool";
  s.doc = doc;
  s.attrs = {{"output_size", AttrKind::kInts, std::nullopt, "output spatial size"}};
  s.infer = [spatial](const OpCall& call, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(expect_floating(call, 0));
    TF_RETURN_IF_ERROR(expect_rank(call, 0, spatial + 2, spatial + 2, "input (N, C, spatial...)"));
    TF_ASSIGN_OR_RETURN(Dims size, spatial_attr(call.attrs, "output_size", spatial));
    Dims shape{call.in(0).shape[0], call.in(0).shape[1]};
    for (int64_t v : size) {
      if (v < 1) return invalid_argument("output_size must be positive");
      shape.push_back(v);
    }
    out.push_back(OutputSpec::fresh(shape, call.in(0).dtype));
    return Status();
  };
  s.saved = [spatial](const OpCall& call) {
    const Dims size = spatial_attr(call.attrs, "output_size", spatial).value();
    const bool global = std::all_of(size.begin(), size.end(), [](int64_t v) { return v == 1; });
    if (global && call.torch2()) return SavedList{};
    return SavedList{saved_input(0)};
  };
  s.workspace = no_workspace;
  return s;
}

}  // namespace

void add_pool_ops(std::vector<OpSchema>& ops) {
  ops.push_back(
      pool_schema("max_pool1d", "1-D max pooling; keeps input and int64 indices", 1, true));
  ops.push_back(
      pool_schema("max_pool2d", "2-D max pooling; keeps input and int64 indices", 2, true));
  ops.push_back(pool_schema("avg_pool1d", "1-D average pooling; keeps the input", 1, false));
  ops.push_back(pool_schema("avg_pool2d", "2-D average pooling; keeps the input", 2, false));
  ops.push_back(adaptive_schema("adaptive_avg_pool1d",
                                "1-D average pooling to a fixed size; keeps the input", 1));
  ops.push_back(adaptive_schema(
      "adaptive_avg_pool2d",
      "2-D average pooling to a fixed size; to 1x1 it is a mean (keeps nothing on PyTorch 2)", 2));
}

}  // namespace trainfit
