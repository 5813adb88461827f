#include "sources/zoo/nn.h"

#include <fmt/format.h>

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

ValueId cast(GraphBuilder& b, ValueId x, DType dtype) {
  if (!b.ok() || b.value(x).dtype == dtype) return x;
  return b.call1("to_copy", {x}, {{"dtype", std::string(dtype_name(dtype))}});
}

namespace {

// One adapter, lora_A or lora_B: a ModuleDict holding the Linear "default", without bias, its
// weight in `dtype`. Its argument (lora_dropout's output in lora_A(dropout(x))) is the caller's
// until the call returns, even where autocast hands the product a lowered copy.
ValueId adapter(GraphBuilder& b, std::string_view name, ValueId x, int64_t out, DType dtype) {
  auto dict = b.module(name, "ModuleDict");
  auto layer = b.module("default", "Linear");
  const ValueId weight = b.parameter("weight", {out, b.dim(x, -1)}, /*buffer=*/false, dtype);
  const ValueId y = b.call1("linear", {x}, {{"out_features", out}, {"bias", false}}, {weight});
  hold(b, {x});
  return y;
}

bool under_autocast(const GraphBuilder& b) {
  return is_amp(b.options().precision);
}

// bitsandbytes' Linear4bit.forward: x.to(compute dtype), matmul_4bit(x, weight.t(), bias)
// (dequantize_4bit, then MatMul4Bit), .to(x's dtype). The compute dtype is the model's, or
// under autocast the autocast dtype (bnb_4bit_compute_dtype=bfloat16 with the Trainer's
// bf16=True; the base's other parameters fp32). The products run in the compute dtype whether
// autocast is on or not: both operands of MatMul4Bit's F.linear are already in it.
ValueId linear_4bit(GraphBuilder& b, std::string_view name, ValueId x, int64_t out, bool bias,
                    const LoraConfig& quant) {
  auto layer = b.module(name, "Linear4bit");
  if (!b.ok()) return kNone;
  if (bias && (quant.prepare || under_autocast(b))) {
    // bitsandbytes then keeps the bias in the input's dtype (fp32) and casts a copy to the
    // compute dtype on every call.
    b.fail(unsupported(fmt::format("{} over 4-bit layers with biases is not modelled yet",
                                   quant.prepare ? "--lora prepare=true" : "autocast"),
                       "leave prepare and autocast out (the base in --precision bf16), or use a "
                       "model without Linear biases"));
    return kNone;
  }
  const DType input_dtype = b.value(x).dtype;
  const DType compute =
      under_autocast(b) ? autocast_dtype(b.options().precision) : b.activation_dtype();
  x = cast(b, x, compute);
  const ValueId weight = b.call("dequantize_4bit", {},
                                {{"out_features", out},
                                 {"in_features", b.dim(x, -1)},
                                 {"dtype", std::string(dtype_name(compute))},
                                 {"double_quant", quant.double_quant}})[0];
  const ValueId y =
      b.call1("matmul_4bit", {x, weight}, {{"bias", bias}, {"double_quant", quant.double_quant}});
  return cast(b, y, input_dtype);
}

// peft's lora.Linear.forward: result = base_layer(x); x = x.to(lora_A's dtype);
// result = result + lora_B(lora_A(dropout(x))) * scaling; result.to(the base result's dtype).
// Over a 4-bit base (peft's lora.Linear4bit): result = base_layer(x).clone(), and the adapters'
// output is cast to the result's dtype before the add; under autocast neither cast is made
// (requires_conversion = not torch.is_autocast_enabled()), so the adapters take x as it is and
// autocast lowers it, and the add promotes.
ValueId lora_linear(GraphBuilder& b, std::string_view name, ValueId x, int64_t out, bool bias,
                    const LoraConfig& lora) {
  auto layer = b.module(name, "lora.Linear");
  const bool quantized = lora.quant != LoraConfig::Quant::kOff;
  ValueId result = kNone;
  if (quantized) {
    result = b.call1("clone", {linear_4bit(b, "base_layer", x, out, bias, lora)});
  } else {
    result = op_module(b, "base_layer", "Linear", "linear", {x},
                       {{"out_features", out}, {"bias", bias}});
  }
  if (!b.ok()) return kNone;
  const bool convert = !(quantized && under_autocast(b));
  const DType base_dtype = b.value(result).dtype;
  const DType dtype = lora.fp32_adapters ? DType::kFloat32 : b.activation_dtype();
  const ValueId input = convert ? cast(b, x, dtype) : x;
  ValueId h = input;
  if (lora.dropout > 0) {
    auto dict = b.module("lora_dropout", "ModuleDict");
    h = dropout(b, "default", h, lora.dropout);
  }
  h = adapter(b, "lora_A", h, lora.rank, dtype);
  h = adapter(b, "lora_B", h, out, dtype);
  h = b.call1("mul_scalar", {h}, {{"value", lora.alpha / static_cast<double>(lora.rank)}});
  if (quantized) {
    result = add(b, result, convert ? cast(b, h, base_dtype) : h);
  } else {
    result = cast(b, add(b, result, h), base_dtype);
  }
  // The forward's local x (the cast input), and its argument, which the caller holds until the
  // call returns even when it is a temporary of the caller's expression (down_proj(act * up)).
  hold(b, {input, x});
  return result;
}

}  // namespace

ValueId linear(GraphBuilder& b, std::string_view name, ValueId x, int64_t out, bool bias) {
  if (const LoraConfig* lora = b.lora_for(name)) return lora_linear(b, name, x, out, bias, *lora);
  if (b.options().lora && b.options().lora->quant != LoraConfig::Quant::kOff) {
    return linear_4bit(b, name, x, out, bias, *b.options().lora);
  }
  return op_module(b, name, "Linear", "linear", {x}, {{"out_features", out}, {"bias", bias}});
}

void hold(GraphBuilder& b, std::initializer_list<ValueId> values) {
  for (ValueId v : values) {
    if (v == kNone || !b.ok()) continue;
    b.call1("expand", {v}, {{"sizes", b.value(v).shape}});
  }
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
