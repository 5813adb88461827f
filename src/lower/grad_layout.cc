#include "lower/grad_layout.h"

#include <string_view>

#include "base/size_math.h"
#include "graph/op_schema.h"

namespace trainfit {
namespace {

bool is_reshape(std::string_view op) {
  return op == "view" || op == "reshape" || op == "flatten" || op == "unflatten" ||
         op == "squeeze" || op == "unsqueeze";
}

bool is_convolution(std::string_view op) {
  return op == "conv1d" || op == "conv2d" || op == "conv_transpose1d" || op == "conv_transpose2d";
}

// channels_last strides of a 4-D shape: (N, C, H, W) stored as N, H, W, C.
bool is_channels_last(const Dims& shape, const Dims& strides) {
  if (shape.size() != 4) return false;
  const Dims nhwc = contiguous_strides(Dims{shape[0], shape[2], shape[3], shape[1]});
  const Dims expected{nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
  for (size_t d = 0; d < 4; ++d) {
    if (shape[d] != 1 && strides[d] != expected[d]) return false;
  }
  return true;
}

}  // namespace

std::optional<Dims> view_grad_strides(const Graph& g, const Node& node, int input,
                                      const Dims& incoming) {
  const std::string_view op = node.op->name;
  const Dims& in = g.value(node.inputs[static_cast<size_t>(input)]).shape;
  const Dims& out = g.value(node.outputs[0]).shape;
  if (incoming.size() != out.size()) return contiguous_strides(in);
  const auto rank = static_cast<int64_t>(in.size());
  if (op == "transpose") {
    const Result<int64_t> a = wrap_dim(node.attrs.get_int("dim0"), rank);
    const Result<int64_t> b = wrap_dim(node.attrs.get_int("dim1"), rank);
    if (!a.ok() || !b.ok()) return contiguous_strides(in);
    Dims s = incoming;
    std::swap(s[static_cast<size_t>(*a)], s[static_cast<size_t>(*b)]);
    return s;
  }
  if (op == "permute") {
    const Dims& dims = node.attrs.get_ints("dims");
    Dims s(in.size(), 0);
    for (size_t i = 0; i < dims.size() && i < incoming.size(); ++i) {
      const Result<int64_t> d = wrap_dim(dims[i], rank);
      if (!d.ok()) return contiguous_strides(in);
      s[static_cast<size_t>(*d)] = incoming[i];
    }
    return s;
  }
  if (is_reshape(op)) return view_strides(out, incoming, in);
  if (op == "stack") {
    const Result<int64_t> d = wrap_dim(node.attrs.get_int("dim"), rank + 1);
    if (!d.ok()) return contiguous_strides(in);
    Dims s = incoming;
    s.erase(s.begin() + *d);
    return s;
  }
  // The very gradient (add's pass-through, contiguous, dropout as identity), or a narrow of it
  // (cat, pad): the same strides.
  if (in == out || op == "cat" || op == "pad") return incoming;
  return contiguous_strides(in);
}

bool hands_on_view(const Node& node) {
  const std::string_view op = node.op->name;
  return is_reshape(op) || op == "transpose" || op == "permute" || op == "cat" || op == "stack" ||
         op == "sum";
}

GradCopy grad_copy(const Graph& g, const Node& node, const Dims& incoming) {
  const std::string_view op = node.op->name;
  const Dims& out = g.value(node.outputs[0]).shape;
  if (incoming.size() != out.size() || is_contiguous(out, incoming)) return GradCopy::kNoCopy;
  if (op == "layer_norm") return GradCopy::kKernelLast;
  if (op == "linear" && out.size() > 2 && out.back() > 0) {
    const Dims rows{static_cast<int64_t>(checked_numel(out).value_or(0) / out.back()), out.back()};
    return view_strides(out, incoming, rows) ? GradCopy::kNoCopy : GradCopy::kBeforeNode;
  }
  // cuDNN wants it contiguous in the convolution's memory format: NCHW unless the model runs
  // channels_last (whose gradients trainfit takes as either layout).
  if (is_convolution(op) && g.target.device == Device::kCuda &&
      (g.memory_format == MemoryFormat::kChannelsFirst || !is_channels_last(out, incoming))) {
    return GradCopy::kPerKernel;
  }
  return GradCopy::kNoCopy;
}

}  // namespace trainfit
