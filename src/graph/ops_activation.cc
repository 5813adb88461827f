// Pointwise activations, softmax/log_softmax and dropout.
//
// autograd keeps the output for relu, sigmoid, tanh and softmax (their derivatives are written
// in terms of the result) and the input for gelu, silu, mish, hardswish, hardsigmoid and relu6
// (hardtanh). An in-place variant of an op whose backward needs the input cannot keep the
// input, which it overwrites: autograd keeps a copy of the original made before the op (as
// the op cases measure for relu6_, silu_, mish_, hardswish_, hardsigmoid_).
#include <fmt/format.h>

#include "base/size_math.h"
#include "graph/device_rules.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

enum class Keeps : uint8_t { kInput, kOutput };

struct Activation {
  std::string_view name;
  std::string_view doc;
  Keeps keeps;
  bool has_inplace;
};

constexpr Activation kActivations[] = {
    {"relu", "max(x, 0) (nn.ReLU); keeps the output", Keeps::kOutput, true},
    {"relu6", "min(max(x, 0), 6) (nn.ReLU6, hardtanh); keeps the input", Keeps::kInput, true},
    {"gelu", "Gaussian error linear unit (nn.GELU, exact or tanh); keeps the input", Keeps::kInput,
     false},
    {"silu", "x * sigmoid(x) (nn.SiLU); keeps the input", Keeps::kInput, true},
    {"mish", "x * tanh(softplus(x)) (nn.Mish); keeps the input", Keeps::kInput, true},
    {"sigmoid", "1 / (1 + exp(-x)) (nn.Sigmoid); keeps the output", Keeps::kOutput, true},
    {"tanh", "tanh(x) (nn.Tanh); keeps the output", Keeps::kOutput, true},
    {"hardswish", "x * relu6(x + 3) / 6 (nn.Hardswish); keeps the input", Keeps::kInput, true},
    {"hardsigmoid", "relu6(x + 3) / 6 (nn.Hardsigmoid); keeps the input", Keeps::kInput, true},
};

bool inplace(const OpCall& call) {
  const AttrValue* v = call.attrs.find("inplace");
  return v != nullptr && std::get<bool>(*v);
}

OpSchema activation_schema(const Activation& a) {
  OpSchema s;
  s.name = a.name;
  s.family = "activation";
  s.doc = a.doc;
  if (a.has_inplace) {
    s.attrs.push_back({"inplace", AttrKind::kBool, AttrValue{false}, "overwrite the input"});
  }
  if (a.name == "gelu") {
    s.attrs.push_back({"approximate", AttrKind::kString, AttrValue{std::string("none")},
                       "'none' (erf) or 'tanh'"});
  }
  const Keeps keeps = a.keeps;
  s.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(expect_floating(call, 0));
    const Value& x = call.in(0);
    if (const AttrValue* approx = call.attrs.find("approximate")) {
      const std::string& v = std::get<std::string>(*approx);
      if (v != "none" && v != "tanh") {
        return invalid_argument(
            fmt::format("gelu approximate must be 'none' or 'tanh', got '{}'", v));
      }
    }
    if (!inplace(call)) {
      out.push_back(
          OutputSpec::fresh_strided(x.shape, empty_like_strides(x.shape, x.strides), x.dtype));
      return Status();
    }
    out.push_back(OutputSpec::alias(0, x.shape, x.strides, x.dtype));
    return Status();
  };
  s.params = nullptr;
  s.saved = [keeps](const OpCall& call) {
    if (keeps == Keeps::kOutput) return SavedList{saved_output(0)};
    if (!inplace(call)) return SavedList{saved_input(0)};
    return SavedList{saved_output(1)};
  };
  s.workspace = no_workspace;
  if (keeps == Keeps::kInput && a.has_inplace) {
    // The in-place variant keeps a copy of the original input: output 1.
    auto base_infer = s.infer;
    s.infer = [base_infer](const OpCall& call, std::vector<OutputSpec>& out) {
      TF_RETURN_IF_ERROR(base_infer(call, out));
      if (inplace(call) && call.requires_grad(0)) {
        const Value& x = call.in(0);
        out.push_back(OutputSpec::aux(x.shape, x.dtype));
      }
      return Status();
    };
  }
  return s;
}

// ---- softmax, log_softmax -----------------------------------------------------------------

Result<DType> softmax_dtype(const OpCall& call) {
  const std::string& name = call.attrs.get_string("dtype");
  if (name.empty()) return call.in(0).dtype;
  const auto d = parse_dtype(name);
  if (!d || !is_floating(*d)) return invalid_argument(fmt::format("bad softmax dtype '{}'", name));
  return *d;
}

// CUDA reads an fp16 input straight into an fp32 result (half_to_float); any other dtype
// change converts the input first, a transient copy (SoftMax.cpp softmax/log_softmax).
bool half_to_float(const OpCall& call, DType out) {
  return call.on_cuda() && call.in(0).dtype == DType::kFloat16 && out == DType::kFloat32;
}

OpSchema softmax_schema(std::string_view name, std::string_view doc) {
  OpSchema s;
  s.name = name;
  s.family = "activation";
  s.doc = doc;
  s.attrs = {{"dim", AttrKind::kInt, std::nullopt, "dimension to normalize"},
             {"dtype", AttrKind::kString, AttrValue{std::string()},
              "compute and return in this dtype ('' keeps the input's)"}};
  s.autocast = Autocast::kFp32Output;
  s.cpu_autocast = Autocast::kUnchanged;  // not on the CPU's fp32 list
  s.compute_dtype_attr = "dtype";
  s.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(expect_floating(call, 0));
    const Value& x = call.in(0);
    TF_RETURN_IF_ERROR(
        wrap_dim(call.attrs.get_int("dim"), static_cast<int64_t>(x.shape.size())).status());
    TF_ASSIGN_OR_RETURN(DType dtype, softmax_dtype(call));
    out.push_back(OutputSpec::fresh(x.shape, dtype));
    return Status();
  };
  s.saved = [](const OpCall&) { return SavedList{saved_output(0)}; };
  if (name == "softmax") {
    // Note [Softmax's backward]: on CUDA, grad * output in the output's dtype first.
    s.backward = [](const OpCall& call) {
      BackwardSpec spec = backward_of(OpSchema{}, call);
      if (softmax_backward_takes_product(call.target) && !spec.grads.empty()) {
        const Value& x = call.in(0);
        const DType dtype = softmax_dtype(call).ok() ? *softmax_dtype(call) : x.dtype;
        const int64_t product = checked_numel(x.shape).value_or(0) * dtype_bytes(dtype);
        spec.grads[0].workspace.push_back(product);
        spec.grads[0].product_first_bytes = product;
      }
      return spec;
    };
  }
  s.workspace = [](const OpCall& call) -> int64_t {
    const Value& x = call.in(0);
    const DType dtype = softmax_dtype(call).ok() ? *softmax_dtype(call) : x.dtype;
    const int64_t numel = checked_numel(x.shape).value_or(0);
    int64_t bytes = 0;
    if (dtype != x.dtype && !half_to_float(call, dtype)) bytes += numel * dtype_bytes(dtype);
    if (!is_contiguous(x.shape, x.strides)) bytes += numel * dtype_bytes(dtype);
    return bytes;
  };
  return s;
}

// ---- dropout ------------------------------------------------------------------------------

// device_rules.h Note [Dropout's mask]: a bool mask (CUDA's fused kernel) or a noise tensor.
bool fused_dropout(const OpCall& call, double p) {
  return keeps_dropout_mask(call.target, inplace(call), p,
                            checked_numel(call.in(0).shape).value_or(0));
}

bool dropout_is_identity(const OpCall& call) {
  return call.attrs.get_float("p") == 0.0 || !call.attrs.get_bool("training");
}

OpSchema dropout_schema() {
  OpSchema s;
  s.name = "dropout";
  s.family = "activation";
  s.doc = "zero elements with probability p (nn.Dropout); keeps a mask (CUDA) or noise (CPU)";
  s.attrs = {{"p", AttrKind::kFloat, AttrValue{0.5}, "probability of zeroing"},
             {"training", AttrKind::kBool, AttrValue{true}, "identity when false"},
             {"inplace", AttrKind::kBool, AttrValue{false}, "overwrite the input"}};
  s.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(expect_floating(call, 0));
    const Value& x = call.in(0);
    const double p = call.attrs.get_float("p");
    if (p < 0 || p > 1) return invalid_argument(fmt::format("dropout p={} is not in [0, 1]", p));
    if (dropout_is_identity(call)) {
      out.push_back(OutputSpec::alias(0, x.shape, x.strides, x.dtype));
      return Status();
    }
    const Dims strides = empty_like_strides(x.shape, x.strides);
    if (inplace(call)) {
      out.push_back(OutputSpec::alias(0, x.shape, x.strides, x.dtype));
    } else {
      out.push_back(OutputSpec::fresh_strided(x.shape, strides, x.dtype));
    }
    if (fused_dropout(call, p)) {
      OutputSpec mask = OutputSpec::aux(x.shape, DType::kBool);
      mask.strides = strides;
      out.push_back(std::move(mask));
    } else if (p == 1) {
      out.push_back(OutputSpec::aux({}, x.dtype));  // the zeros scalar it multiplies by
    } else {
      OutputSpec noise = OutputSpec::aux(x.shape, x.dtype);
      noise.strides = strides;
      out.push_back(std::move(noise));
    }
    return Status();
  };
  s.saved = [](const OpCall& call) {
    if (dropout_is_identity(call)) return SavedList{};
    return SavedList{saved_output(1)};
  };
  // The mask (CUDA's dropout_cuda) or the noise (_dropout_impl) is made before the output.
  s.forward_steps = [](const OpCall& call) {
    std::vector<MemoryStep> steps;
    if (!dropout_is_identity(call)) {
      steps = {{MemoryStep::Kind::kOutput, 1}, {MemoryStep::Kind::kOutput, 0}};
    }
    return steps;
  };
  s.backward = [](const OpCall& call) {
    return dropout_is_identity(call) ? alias_backward(call) : backward_of(OpSchema{}, call);
  };
  s.workspace = no_workspace;
  return s;
}

}  // namespace

void add_activation_ops(std::vector<OpSchema>& ops) {
  for (const Activation& a : kActivations) ops.push_back(activation_schema(a));
  ops.push_back(softmax_schema("softmax", "softmax along dim (nn.Softmax); keeps the output"));
  ops.push_back(
      softmax_schema("log_softmax", "log of softmax along dim (nn.LogSoftmax); keeps the output"));
  ops.push_back(dropout_schema());
}

}  // namespace trainfit
