// torch.nn-style helpers for writing zoo models: each runs one registry op as one named
// module, so summary rows and parameter names match PyTorch's state_dict.
//
//   x = nn::conv2d(b, "conv1", x, {.out = 64, .kernel = 7, .stride = 2, .padding = 3, .bias =
//   false}); x = nn::batch_norm2d(b, "bn1", x); x = nn::relu(b, "relu", x, /*inplace=*/true);
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace trainfit::nn {

// One registry op run inside a module named `name` of type `type`.
ValueId op_module(GraphBuilder& b, std::string_view name, std::string_view type,
                  std::string_view op, std::vector<ValueId> inputs, const Attrs& attrs = {},
                  std::vector<ValueId> params = {});

struct Conv {
  int64_t out = 0;
  int64_t kernel = 1;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
ValueId conv1d(GraphBuilder& b, std::string_view name, ValueId x, const Conv& c);
ValueId conv2d(GraphBuilder& b, std::string_view name, ValueId x, const Conv& c);
ValueId conv_transpose1d(GraphBuilder& b, std::string_view name, ValueId x, const Conv& c);

ValueId batch_norm2d(GraphBuilder& b, std::string_view name, ValueId x);
ValueId frozen_batch_norm2d(GraphBuilder& b, std::string_view name, ValueId x);
ValueId group_norm(GraphBuilder& b, std::string_view name, ValueId x, int64_t groups,
                   double eps = 1e-5);
ValueId layer_norm(GraphBuilder& b, std::string_view name, ValueId x, double eps = 1e-5);
// nn.Linear; under BuildOptions::lora, a target becomes peft's lora.Linear, and with a 4-bit base
// every Linear is a bitsandbytes Linear4bit.
ValueId linear(GraphBuilder& b, std::string_view name, ValueId x, int64_t out, bool bias = true);
ValueId relu(GraphBuilder& b, std::string_view name, ValueId x, bool inplace = false);
ValueId mish(GraphBuilder& b, std::string_view name, ValueId x);
ValueId gelu(GraphBuilder& b, std::string_view name, ValueId x, bool tanh = false);
ValueId dropout(GraphBuilder& b, std::string_view name, ValueId x, double p, bool inplace = false);
ValueId max_pool2d(GraphBuilder& b, std::string_view name, ValueId x, int64_t kernel,
                   int64_t stride, int64_t padding = 0);
ValueId adaptive_avg_pool2d(GraphBuilder& b, std::string_view name, ValueId x, int64_t h,
                            int64_t w);

// A parameter owned by a module of its own (nn.Embedding's table used through .weight).
ValueId module_parameter(GraphBuilder& b, std::string_view module, std::string_view type,
                         std::string_view name, Dims shape);

// x.to(dtype): a copy when the dtype differs, else x itself.
ValueId cast(GraphBuilder& b, ValueId x, DType dtype);

// Python locals (and what a forward returns) keep tensors alive until the function returns: a
// view of each, made here, keeps its storage until here.
void hold(GraphBuilder& b, std::initializer_list<ValueId> values);

// Unnamed functional ops, run in the current module (torch.flatten, x + y, ...).
ValueId flatten(GraphBuilder& b, ValueId x, int64_t start_dim = 0, int64_t end_dim = -1);
ValueId add(GraphBuilder& b, ValueId x, ValueId y, bool inplace = false);
ValueId cross_entropy(GraphBuilder& b, std::string_view name, ValueId logits, ValueId target);

}  // namespace trainfit::nn
