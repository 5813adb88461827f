#include "sources/zoo/nn.h"

namespace trainfit::nn {

ValueId op_module(GraphBuilder& b, std::string_view name, std::string_view type,
                  std::string_view op, std::vector<ValueId> inputs, const Attrs& attrs,
                  std::vector<ValueId> params) {
  auto scope = b.module(name, type);
  return b.call1(op, std::move(inputs), attrs, std::move(params));
}

namespace {

Attrs conv_attrs(const Conv& c) {
  return {{"out_channels", c.out}, {"kernel_size", c.kernel}, {"stride", c.stride},
          {"padding", c.padding},  {"dilation", c.dilation},  {"groups", c.groups},
          {"bias", c.bias}};
}

}  // namespace

ValueId conv1d(GraphBuilder& b, std::string_view name, ValueId x, const Conv& c) {
  return op_module(b, name, "Conv1d", "conv1d", {x}, conv_attrs(c));
}

ValueId conv2d(GraphBuilder& b, std::string_view name, ValueId x, const Conv& c) {
  return op_module(b, name, "Conv2d", "conv2d", {x}, conv_attrs(c));
}

ValueId conv_transpose1d(GraphBuilder& b, std::string_view name, ValueId x, const Conv& c) {
  return op_module(b, name, "ConvTranspose1d", "conv_transpose1d", {x}, conv_attrs(c));
}

ValueId batch_norm2d(GraphBuilder& b, std::string_view name, ValueId x) {
  return op_module(b, name, "BatchNorm2d", "batch_norm", {x});
}

ValueId frozen_batch_norm2d(GraphBuilder& b, std::string_view name, ValueId x) {
  return op_module(b, name, "FrozenBatchNorm2d", "frozen_batch_norm", {x});
}

ValueId group_norm(GraphBuilder& b, std::string_view name, ValueId x, int64_t groups, double eps) {
  return op_module(b, name, "GroupNorm", "group_norm", {x}, {{"num_groups", groups}, {"eps", eps}});
}

ValueId layer_norm(GraphBuilder& b, std::string_view name, ValueId x, double eps) {
  if (x == kNone) return kNone;
  return op_module(b, name, "LayerNorm", "layer_norm", {x},
                   {{"normalized_shape", Dims{b.dim(x, -1)}}, {"eps", eps}});
}

ValueId linear(GraphBuilder& b, std::string_view name, ValueId x, int64_t out, bool bias) {
  return op_module(b, name, "Linear", "linear", {x}, {{"out_features", out}, {"bias", bias}});
}

ValueId relu(GraphBuilder& b, std::string_view name, ValueId x, bool inplace) {
  return op_module(b, name, "ReLU", "relu", {x}, {{"inplace", inplace}});
}

ValueId mish(GraphBuilder& b, std::string_view name, ValueId x) {
  return op_module(b, name, "Mish", "mish", {x});
}

ValueId gelu(GraphBuilder& b, std::string_view name, ValueId x, bool tanh) {
  return op_module(b, name, "GELU", "gelu", {x},
                   {{"approximate", std::string(tanh ? "tanh" : "none")}});
}

ValueId dropout(GraphBuilder& b, std::string_view name, ValueId x, double p, bool inplace) {
  return op_module(b, name, "Dropout", "dropout", {x}, {{"p", p}, {"inplace", inplace}});
}

ValueId max_pool2d(GraphBuilder& b, std::string_view name, ValueId x, int64_t kernel,
                   int64_t stride, int64_t padding) {
  return op_module(b, name, "MaxPool2d", "max_pool2d", {x},
                   {{"kernel_size", kernel}, {"stride", stride}, {"padding", padding}});
}

ValueId adaptive_avg_pool2d(GraphBuilder& b, std::string_view name, ValueId x, int64_t h,
                            int64_t w) {
  return op_module(b, name, "AdaptiveAvgPool2d", "adaptive_avg_pool2d", {x},
                   {{"output_size", Dims{h, w}}});
}

ValueId module_parameter(GraphBuilder& b, std::string_view module, std::string_view type,
                         std::string_view name, Dims shape) {
  auto scope = b.module(module, type);
  return b.parameter(name, std::move(shape));
}

ValueId flatten(GraphBuilder& b, ValueId x, int64_t start_dim, int64_t end_dim) {
  return b.call1("flatten", {x}, {{"start_dim", start_dim}, {"end_dim", end_dim}});
}

ValueId add(GraphBuilder& b, ValueId x, ValueId y, bool inplace) {
  return b.call1("add", {x, y}, {{"inplace", inplace}});
}

ValueId cross_entropy(GraphBuilder& b, std::string_view name, ValueId logits, ValueId target) {
  return op_module(b, name, "CrossEntropyLoss", "cross_entropy", {logits, target});
}

}  // namespace trainfit::nn
