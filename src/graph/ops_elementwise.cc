// Elementwise ops: add, sub, mul, div with broadcasting; ops with a Python scalar; unary math;
// where, masked_fill; to_copy (dtype casts, also what autocast inserts).
//
// autograd: add and sub keep nothing; mul keeps each operand for the other's gradient; div
// keeps the divisor, and the dividend when the divisor needs a gradient. A Python scalar
// becomes a 0-dim float64 tensor that mul and div keep: 8 bytes of host memory.
// Outputs follow TensorIterator's layout rule (shape.h elementwise_output_strides).
#include <fmt/format.h>

#include <cmath>

#include "graph/op_registry.h"

namespace trainfit {
namespace {

bool inplace(const OpCall& call) {
  const AttrValue* v = call.attrs.find("inplace");
  return v != nullptr && std::get<bool>(*v);
}

// Type promotion where a 0-dim tensor does not outrank a dimensioned one of the same category.
DType result_dtype(const Value& a, const Value& b) {
  const bool a_scalar = a.shape.empty();
  const bool b_scalar = b.shape.empty();
  if (is_floating(a.dtype) == is_floating(b.dtype) && a_scalar != b_scalar) {
    return a_scalar ? b.dtype : a.dtype;
  }
  return promote_types(a.dtype, b.dtype);
}

Status elementwise_output(const OpCall& call, std::vector<OutputSpec>& out, DType dtype,
                          std::span<const size_t> operands) {
  Dims shape;
  std::vector<Layout> layouts;
  for (size_t i : operands) {
    const Value& v = call.in(i);
    if (layouts.empty()) {
      shape = v.shape;
    } else {
      TF_ASSIGN_OR_RETURN(shape, broadcast_shapes(shape, v.shape));
    }
    layouts.push_back({v.shape, v.strides});
  }
  if (inplace(call)) {
    const Value& self = call.in(operands[0]);
    if (shape != self.shape) {
      return invalid_argument(fmt::format("in-place result {} does not fit the input {}",
                                          shape_string(shape), shape_string(self.shape)));
    }
    out.push_back(
        OutputSpec::alias(static_cast<int>(operands[0]), self.shape, self.strides, self.dtype));
    return {};
  }
  out.push_back(
      OutputSpec::fresh_strided(shape, elementwise_output_strides(shape, layouts), dtype));
  return {};
}

// ---- tensor-tensor ------------------------------------------------------------------------

enum class Binary : uint8_t { kAdd, kSub, kMul, kDiv };

OpSchema binary_schema(std::string_view name, std::string_view doc, Binary kind) {
  OpSchema s;
  s.name = name;
  s.family = "elementwise";
  s.doc = doc;
  s.min_inputs = 2;
  s.max_inputs = 2;
  if (kind == Binary::kAdd || kind == Binary::kSub) {
    s.attrs.push_back({"alpha", AttrKind::kFloat, AttrValue{1.0}, "multiplier of other"});
  }
  s.attrs.push_back({"inplace", AttrKind::kBool, AttrValue{false}, "write into the first input"});
  // In place (a *= b, a /= b), b's gradient needs a as it was: autograd saves a clone of it
  // made before the write (an aux output here).
  auto saves_original = [kind](const OpCall& call) {
    return (kind == Binary::kMul || kind == Binary::kDiv) && inplace(call) && call.requires_grad(1);
  };
  s.infer = [saves_original](const OpCall& call, std::vector<OutputSpec>& out) {
    const size_t operands[] = {0, 1};
    TF_RETURN_IF_ERROR(
        elementwise_output(call, out, result_dtype(call.in(0), call.in(1)), operands));
    if (saves_original(call)) out.push_back(OutputSpec::aux(call.in(0).shape, call.in(0).dtype));
    return Status();
  };
  s.saved = [kind, saves_original](const OpCall& call) {
    if (saves_original(call)) {
      SavedList saved{saved_output(1)};
      if (kind == Binary::kDiv || call.requires_grad(0)) saved.push_back(saved_input(1));
      return saved;
    }
    SavedList saved;
    if (kind == Binary::kMul) {
      if (call.requires_grad(0)) saved.push_back(saved_input(1));
      if (call.requires_grad(1)) saved.push_back(saved_input(0));
    } else if (kind == Binary::kDiv) {
      saved.push_back(saved_input(1));
      if (call.requires_grad(1)) saved.push_back(saved_input(0));
    }
    return saved;
  };
  s.workspace = no_workspace;
  // add and sub hand the gradient through unless it must be reduced to a broadcast input or
  // scaled (alpha, or the negation of sub's second operand).
  //
  // mul's and div's formulas make each gradient at the output's shape (grad * other); the
  // engine then sums the one of a broadcast input down to its shape (validate_outputs), so that
  // full-size tensor is alive, beside the other gradients, until the sum is made. The formulas
  // run other's first (order_grads): the H100 recording of Diffusion Policy's FiLM
  // (scale * out) makes out's gradient, then scale's full-size product, its sum, and frees the
  // product, as 1.13 does on the CPU.
  s.backward = [kind](const OpCall& call) {
    BackwardSpec spec;
    Dims out = call.in(0).shape;
    if (auto b = broadcast_shapes(call.in(0).shape, call.in(1).shape); b.ok()) out = *b;
    const int64_t full =
        checked_numel(out).value_or(0) * dtype_bytes(result_dtype(call.in(0), call.in(1)));
    if (kind == Binary::kMul || kind == Binary::kDiv) {
      spec = backward_of(OpSchema{}, call);
      for (GradRule& rule : spec.grads) {
        rule.summed = call.in(static_cast<size_t>(rule.input)).shape != out;
        if (rule.summed) rule.formula_bytes = full;
      }
      order_grads(spec, {1, 0});
      return spec;
    }
    const double alpha = call.attrs.get_float("alpha");
    for (int i = 0; i < 2; ++i) {
      if (!call.requires_grad(static_cast<size_t>(i))) continue;
      const bool same = call.in(static_cast<size_t>(i)).shape == out;
      const bool scaled = i == 1 && (kind == Binary::kSub || alpha != 1.0);
      GradRule rule{i, same && !scaled ? 0 : -1, true};
      rule.summed = !same;
      if (rule.summed && scaled) rule.formula_bytes = full;
      spec.grads.push_back(std::move(rule));
    }
    order_grads(spec, {1, 0});
    return spec;
  };
  return s;
}

// ---- tensor-scalar ------------------------------------------------------------------------

enum class ScalarKeeps : uint8_t { kNothing, kScalar, kInput };

OpSchema scalar_schema(std::string_view name, std::string_view doc, ScalarKeeps keeps,
                       std::string_view value_name = "value") {
  OpSchema s;
  s.name = name;
  s.family = "elementwise";
  s.doc = doc;
  s.attrs = {{value_name, AttrKind::kFloat, std::nullopt, "the Python scalar"},
             {"inplace", AttrKind::kBool, AttrValue{false}, "write into the input"}};
  if (name == "pow_scalar") {
    s.autocast = Autocast::kFp32;
    s.cpu_autocast = Autocast::kUnchanged;  // not on the CPU's fp32 list
  }
  s.infer = [keeps, name, value_name](const OpCall& call, std::vector<OutputSpec>& out) {
    // An integer tensor stays integral with an integral scalar (a bool one becomes int64),
    // except under true division.
    DType dtype = call.in(0).dtype;
    if (!is_floating(dtype)) {
      const double value = call.attrs.get_float(value_name);
      const bool integral = std::floor(value) == value;
      if (name == "div_scalar" || !integral) {
        dtype = DType::kFloat32;
      } else if (dtype == DType::kBool) {
        dtype = DType::kInt64;
      }
    }
    const size_t operands[] = {0};
    TF_RETURN_IF_ERROR(elementwise_output(call, out, dtype, operands));
    if (keeps == ScalarKeeps::kScalar) {
      OutputSpec scalar = OutputSpec::aux({}, DType::kFloat64);
      scalar.host = true;
      out.push_back(std::move(scalar));
    }
    return Status();
  };
  if (name == "add_scalar" || name == "sub_scalar") s.backward = alias_backward;
  // pow_backward: grad * (c * x.pow(c - 1)); both temporaries live to the end of the
  // expression, beside the gradient it makes.
  if (name == "pow_scalar") {
    s.backward = [](const OpCall& call) {
      BackwardSpec spec = backward_of(OpSchema{}, call);
      if (call.requires_grad(0) && call.attrs.get_float("exponent") != 0.0) {
        spec.scratch.push_back(2 * checked_numel(call.in(0).shape).value_or(0) *
                               dtype_bytes(call.in(0).dtype));
      }
      return spec;
    };
  }
  s.saved = [keeps](const OpCall&) {
    if (keeps == ScalarKeeps::kScalar) return SavedList{saved_output(1)};
    if (keeps == ScalarKeeps::kInput) return SavedList{saved_input(0)};
    return SavedList{};
  };
  s.workspace = no_workspace;
  return s;
}

// ---- unary math ---------------------------------------------------------------------------

OpSchema unary_schema(std::string_view name, std::string_view doc, const SavedList& keeps,
                      Autocast autocast) {
  OpSchema s;
  s.name = name;
  s.family = "elementwise";
  s.doc = doc;
  s.autocast = autocast;
  // rsqrt and exp are on CUDA's fp32 list, not on the CPU's.
  if (autocast == Autocast::kFp32) s.cpu_autocast = Autocast::kUnchanged;
  s.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(expect_floating(call, 0));
    const Value& x = call.in(0);
    out.push_back(
        OutputSpec::fresh_strided(x.shape, empty_like_strides(x.shape, x.strides), x.dtype));
    return Status();
  };
  s.saved = [keeps](const OpCall&) { return keeps; };
  s.workspace = no_workspace;
  return s;
}

}  // namespace

void add_elementwise_ops(std::vector<OpSchema>& ops) {
  ops.push_back(
      binary_schema("add", "a + alpha * b with broadcasting; keeps nothing", Binary::kAdd));
  ops.push_back(
      binary_schema("sub", "a - alpha * b with broadcasting; keeps nothing", Binary::kSub));
  ops.push_back(
      binary_schema("mul", "a * b with broadcasting; keeps each for the other", Binary::kMul));
  ops.push_back(
      binary_schema("div", "a / b with broadcasting; keeps b (and a if b trains)", Binary::kDiv));

  ops.push_back(scalar_schema("add_scalar", "x + c; keeps nothing", ScalarKeeps::kNothing));
  ops.push_back(scalar_schema("sub_scalar", "x - c; keeps nothing", ScalarKeeps::kNothing));
  ops.push_back(scalar_schema("rsub_scalar", "c - x; keeps nothing", ScalarKeeps::kNothing));
  ops.push_back(scalar_schema("mul_scalar", "x * c; keeps c as a 0-dim float64 host tensor",
                              ScalarKeeps::kScalar));
  ops.push_back(scalar_schema("div_scalar", "x / c; keeps c as a 0-dim float64 host tensor",
                              ScalarKeeps::kScalar));
  ops.push_back(scalar_schema("pow_scalar", "x ** c; keeps x", ScalarKeeps::kInput, "exponent"));
  ops.push_back(
      scalar_schema("clamp_min", "max(x, c) (clamp_min); keeps x", ScalarKeeps::kInput, "min"));

  ops.push_back(
      unary_schema("rsqrt", "1 / sqrt(x); keeps the output", {saved_output(0)}, Autocast::kFp32));
  ops.push_back(
      unary_schema("exp", "e ** x; keeps the output", {saved_output(0)}, Autocast::kFp32));
  ops.push_back(
      unary_schema("abs", "|x|; keeps the input", {saved_input(0)}, Autocast::kUnchanged));
  ops.push_back(unary_schema("neg", "-x; keeps nothing", {}, Autocast::kUnchanged));

  OpSchema logical_not;
  logical_not.name = "logical_not";
  logical_not.family = "elementwise";
  logical_not.doc = "~x of a bool mask (bitwise_not); no gradient";
  logical_not.differentiable = false;
  logical_not.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    const Value& x = call.in(0);
    if (is_floating(x.dtype)) return invalid_argument("~x needs a bool or integer tensor");
    out.push_back(OutputSpec::aux(x.shape, x.dtype));
    return Status();
  };
  logical_not.saved = [](const OpCall&) { return SavedList{}; };
  logical_not.workspace = no_workspace;
  ops.push_back(std::move(logical_not));

  OpSchema where;
  where.name = "where";
  where.family = "elementwise";
  where.doc = "condition ? a : b with broadcasting; keeps the bool condition";
  where.min_inputs = 3;
  where.max_inputs = 3;
  where.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    if (call.in(0).dtype != DType::kBool) return invalid_argument("where needs a bool condition");
    const size_t operands[] = {0, 1, 2};
    return elementwise_output(call, out, result_dtype(call.in(1), call.in(2)), operands);
  };
  where.saved = [](const OpCall&) { return SavedList{saved_input(0)}; };
  where.workspace = no_workspace;
  ops.push_back(std::move(where));

  OpSchema fill;
  fill.name = "masked_fill";
  fill.family = "elementwise";
  fill.doc = "x with value where the bool mask is set; keeps the mask";
  fill.min_inputs = 2;
  fill.max_inputs = 2;
  fill.attrs = {{"value", AttrKind::kFloat, std::nullopt, "fill value"},
                {"inplace", AttrKind::kBool, AttrValue{false}, "write into the input"}};
  fill.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    if (call.in(1).dtype != DType::kBool) return invalid_argument("masked_fill needs a bool mask");
    const size_t operands[] = {0, 1};
    return elementwise_output(call, out, call.in(0).dtype, operands);
  };
  fill.saved = [](const OpCall&) { return SavedList{saved_input(1)}; };
  fill.workspace = no_workspace;
  ops.push_back(std::move(fill));

  OpSchema cast;
  cast.name = "to_copy";
  cast.family = "elementwise";
  cast.doc = "x.to(dtype), also the casts autocast inserts; keeps nothing";
  cast.attrs = {{"dtype", AttrKind::kString, std::nullopt, "target dtype"}};
  cast.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    const auto dtype = parse_dtype(call.attrs.get_string("dtype"));
    if (!dtype)
      return invalid_argument(fmt::format("unknown dtype '{}'", call.attrs.get_string("dtype")));
    const Value& x = call.in(0);
    out.push_back(
        OutputSpec::fresh_strided(x.shape, empty_like_strides(x.shape, x.strides), *dtype));
    return Status();
  };
  cast.saved = [](const OpCall&) { return SavedList{}; };
  cast.workspace = no_workspace;
  ops.push_back(std::move(cast));
}

}  // namespace trainfit
