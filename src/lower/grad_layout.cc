#include "lower/grad_layout.h"

#include "base/size_math.h"
#include "graph/op_schema.h"

namespace trainfit {
namespace {

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
  const Dims& in = g.value(node.inputs[static_cast<size_t>(input)]).shape;
  const Dims& out = g.value(node.outputs[0]).shape;
  if (incoming.size() != out.size()) return contiguous_strides(in);
  if (node.op->grad_layout) return node.op->grad_layout(node.attrs, in, out, incoming);
  // The very gradient (add's pass-through, contiguous, dropout as identity).
  return in == out ? incoming : contiguous_strides(in);
}

GradCopy grad_copy(const Graph& g, const Node& node, const Dims& incoming) {
  const Value& output = g.value(node.outputs[0]);
  const Dims& out = output.shape;
  if (incoming.size() != out.size()) return GradCopy::kNoCopy;
  if (node.op->dense_grad == DenseGrad::kOutputLayoutFirst) {
    if (g.target.device != Device::kCuda) return GradCopy::kNoCopy;
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] != 1 && incoming[d] != output.strides[d]) return GradCopy::kKernelFirst;
    }
    return GradCopy::kNoCopy;
  }
  if (is_contiguous(out, incoming)) return GradCopy::kNoCopy;
  switch (node.op->dense_grad) {
    case DenseGrad::kAsIs:
      return GradCopy::kNoCopy;
    case DenseGrad::kCopyLast:
      return GradCopy::kKernelLast;
    case DenseGrad::kFoldRows: {
      if (out.size() <= 2 || out.back() <= 0) return GradCopy::kNoCopy;
      const Dims rows{checked_numel(out).value_or(0) / out.back(), out.back()};
      return view_strides(out, incoming, rows) ? GradCopy::kNoCopy : GradCopy::kBeforeNode;
    }
    case DenseGrad::kOutputLayoutFirst:  // above
      return GradCopy::kNoCopy;
    case DenseGrad::kCudnnCopies:
      // cuDNN wants it contiguous in the convolution's memory format: NCHW unless the model
      // runs channels_last (whose gradients trainfit takes as either layout).
      if (g.target.device != Device::kCuda) return GradCopy::kNoCopy;
      return g.memory_format == MemoryFormat::kChannelsFirst || !is_channels_last(out, incoming)
                 ? GradCopy::kPerKernel
                 : GradCopy::kNoCopy;
  }
  return GradCopy::kNoCopy;
}

}  // namespace trainfit
