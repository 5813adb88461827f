// Matrix products: linear, matmul, bmm, baddbmm.
//
// autograd: mm/addmm/bmm write one formula per operand, so each operand is kept only when the
// *other* one needs a gradient (derivatives.yaml `mm`, `bmm`; gen_variable_type.py guards).
// A first layer keeps its input (the weight needs a gradient) but not its weight.
//
// at::matmul multiplies an N-D tensor by a matrix by folding the leading dims into one mm
// through reshape(-1, k): a copy when they cannot be viewed as one dim, and the copy is what
// mm keeps. PyTorch folds when the matrix needs a gradient or the fold is a view
// (LinearAlgebra.cpp should_fold; the 1.13 CPU build behaves the same, see the op cases).
#include <fmt/format.h>

#include "base/size_math.h"
#include "graph/device_rules.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

Status same_dtype(const OpCall& call, size_t a, size_t b) {
  if (call.in(a).dtype != call.in(b).dtype) {
    return invalid_argument(fmt::format("operands have different dtypes ({} and {})",
                                        dtype_name(call.in(a).dtype),
                                        dtype_name(call.in(b).dtype)));
  }
  return {};
}

// Does folding `t1` (N-D, N >= 3) for a product with a matrix copy it?
bool fold_copies(const Value& t1, bool matrix_requires_grad) {
  const int64_t k = t1.shape.back();
  const int64_t numel = checked_numel(t1.shape).value_or(0);
  const Dims folded{k == 0 ? 0 : numel / k, k};
  const bool viewable = view_strides(t1.shape, t1.strides, folded).has_value();
  const bool folds = matrix_requires_grad || viewable;
  return folds && !viewable;
}

Dims folded_shape(const Dims& shape) {
  const int64_t k = shape.back();
  const int64_t numel = checked_numel(shape).value_or(0);
  return {k == 0 ? 0 : numel / k, k};
}

// ---- linear -------------------------------------------------------------------------------

Result<std::vector<ParamSpec>> linear_params(const OpCall& call) {
  TF_RETURN_IF_ERROR(expect_rank(call, 0, 1, 16, "input"));
  const int64_t in = call.in(0).shape.back();
  const int64_t out = call.attrs.get_int("out_features");
  if (out < 1) return invalid_argument("out_features must be at least 1");
  std::vector<ParamSpec> p{{"weight", {out, in}}};
  if (call.attrs.get_bool("bias")) p.push_back({"bias", {out}});
  return p;
}

Status linear_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  TF_RETURN_IF_ERROR(same_dtype(call, 0, 1));
  const Value& x = call.in(0);
  const Dims& w = call.in(1).shape;
  if (x.shape.back() != w[1]) {
    return invalid_argument(fmt::format("input {} does not match weight {} (in_features {})",
                                        shape_string(x.shape), shape_string(w), w[1]));
  }
  Dims shape = x.shape;
  shape.back() = w[0];
  out.push_back(OutputSpec::fresh(std::move(shape), x.dtype));
  if (x.shape.size() >= 3 && fold_copies(x, call.requires_grad(1))) {
    out.push_back(OutputSpec::aux(folded_shape(x.shape), x.dtype));
  }
  return {};
}

SavedList linear_saved(const OpCall& call) {
  SavedList saved;
  // mat1 (the input, or its folded copy, output 1) is kept for the weight's gradient.
  const bool copied =
      call.in(0).shape.size() >= 3 && fold_copies(call.in(0), call.requires_grad(1));
  if (call.requires_grad(1)) saved.push_back(copied ? saved_output(1) : saved_input(0));
  // mat2 (weight.t(), a view of the parameter) is kept for the input's gradient.
  if (call.requires_grad(0)) saved.push_back(saved_input(1));
  return saved;
}

// ---- matmul -------------------------------------------------------------------------------

struct BatchedOperands {
  Dims batch;
  bool copy_a = false;
  bool copy_b = false;
};

// at::matmul for two operands of rank >= 3: expand to the broadcast batch, reshape each to 3-D
// (a copy when that is not a view), bmm, then view back.
Result<BatchedOperands> batched_operands(const Value& a, const Value& b) {
  const Dims batch_a(a.shape.begin(), a.shape.end() - 2);
  const Dims batch_b(b.shape.begin(), b.shape.end() - 2);
  TF_ASSIGN_OR_RETURN(Dims batch, broadcast_shapes(batch_a, batch_b));
  BatchedOperands ops;
  ops.batch = batch;
  const int64_t batch_numel = checked_numel(batch).value_or(0);
  auto copies = [&](const Value& v) {
    Dims expanded = batch;
    expanded.push_back(v.shape[v.shape.size() - 2]);
    expanded.push_back(v.shape.back());
    Dims strides(expanded.size(), 0);
    const size_t offset = expanded.size() - v.shape.size();
    for (size_t i = 0; i < v.shape.size(); ++i) {
      strides[offset + i] = (v.shape[i] == 1 && expanded[offset + i] != 1) ? 0 : v.strides[i];
    }
    const Dims three{batch_numel, expanded[expanded.size() - 2], expanded.back()};
    return !view_strides(expanded, strides, three).has_value();
  };
  ops.copy_a = copies(a);
  ops.copy_b = copies(b);
  return ops;
}

Status matmul_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(same_dtype(call, 0, 1));
  const Value& a = call.in(0);
  const Value& b = call.in(1);
  if (a.shape.size() < 2 || b.shape.size() < 2 || (a.shape.size() == 2 && b.shape.size() > 2)) {
    return unsupported(fmt::format("matmul of {} by {} is not modelled", shape_string(a.shape),
                                   shape_string(b.shape)),
                       "reshape the operands to (..., n, k) @ (k, m) or batched form");
  }
  const int64_t k = a.shape.back();
  if (b.shape[b.shape.size() - 2] != k) {
    return invalid_argument(
        fmt::format("cannot multiply {} by {}", shape_string(a.shape), shape_string(b.shape)));
  }
  if (b.shape.size() == 2) {
    Dims shape = a.shape;
    shape.back() = b.shape[1];
    out.push_back(OutputSpec::fresh(std::move(shape), a.dtype));
    if (a.shape.size() >= 3 && fold_copies(a, call.requires_grad(1))) {
      out.push_back(OutputSpec::aux(folded_shape(a.shape), a.dtype));
    }
    return {};
  }
  TF_ASSIGN_OR_RETURN(BatchedOperands ops, batched_operands(a, b));
  Dims shape = ops.batch;
  shape.push_back(a.shape[a.shape.size() - 2]);
  shape.push_back(b.shape.back());
  out.push_back(OutputSpec::fresh(std::move(shape), a.dtype));
  const int64_t batch = checked_numel(ops.batch).value_or(0);
  if (ops.copy_a) out.push_back(OutputSpec::aux({batch, a.shape[a.shape.size() - 2], k}, a.dtype));
  if (ops.copy_b) out.push_back(OutputSpec::aux({batch, k, b.shape.back()}, b.dtype));
  return {};
}

SavedList matmul_saved(const OpCall& call) {
  const Value& a = call.in(0);
  const Value& b = call.in(1);
  SavedRef ref_a = saved_input(0);
  SavedRef ref_b = saved_input(1);
  if (b.shape.size() == 2) {
    if (a.shape.size() >= 3 && fold_copies(a, call.requires_grad(1))) ref_a = saved_output(1);
  } else {
    const Result<BatchedOperands> ops = batched_operands(a, b);
    int next = 1;
    if (ops.ok() && ops->copy_a) ref_a = saved_output(next++);
    if (ops.ok() && ops->copy_b) ref_b = saved_output(next);
  }
  SavedList saved;
  if (call.requires_grad(1)) saved.push_back(ref_a);
  if (call.requires_grad(0)) saved.push_back(ref_b);
  return saved;
}

// ---- bmm, baddbmm -------------------------------------------------------------------------

Status bmm_shapes(const Value& a, const Value& b, Dims& out) {
  if (a.shape.size() != 3 || b.shape.size() != 3 || a.shape[0] != b.shape[0] ||
      a.shape[2] != b.shape[1]) {
    return invalid_argument(fmt::format("bmm needs (b, n, m) @ (b, m, p), got {} and {}",
                                        shape_string(a.shape), shape_string(b.shape)));
  }
  out = {a.shape[0], a.shape[1], b.shape[2]};
  return {};
}

// A product with output `out` (..., M, N) and inner dimension `inner`, its leading dims batched;
// `a` and `b` are the inputs whose gradients are products.
GemmShape product(const Dims& out, int64_t inner, int a, int b) {
  GemmShape g;
  g.n = out.empty() ? 1 : out.back();
  g.m = out.size() < 2 ? 1 : out[out.size() - 2];
  const int64_t mn = g.m * g.n;
  g.batch = mn == 0 ? 0 : checked_numel(out).value_or(0) / mn;
  g.k = inner;
  g.operands = (1U << a) | (1U << b);
  return g;
}

// ---- bitsandbytes 4-bit --------------------------------------------------------------------
//
// A Linear4bit (bitsandbytes, as transformers' BitsAndBytesConfig(load_in_4bit=True) makes one of
// every Linear but lm_head) stores its weight as Params4bit: two 4-bit codes (NF4 or FP4) per
// uint8, shape ((n + 1) / 2, 1) for n = out * in weights, and a QuantState beside it: one absmax
// per block of 64 weights (fp32, or with double quantization uint8 codes of absmax - offset, with
// one fp32 absmax per 256 of those, the 256-entry dynamic map and the fp32 offset) and the
// 16-entry code book. Its forward (MatMul4Bit) dequantizes the whole weight into the dtype it was
// loaded in (the absmax first, into fp32, when nested), multiplies, and keeps neither the input
// nor the dequantized weight: backward dequantizes again for the input's gradient, and the weight
// gets none (bitsandbytes/autograd/_functions.py, functional.py dequantize_4bit).

constexpr int64_t kQuantBlock = 64;          // weights per absmax
constexpr int64_t kNestedBlock = 256;        // absmax codes per nested absmax
constexpr int64_t kDynamicMapEntries = 256;  // create_dynamic_map()
constexpr int64_t kCodeBookEntries = 16;     // get_4bit_type("nf4" | "fp4")

int64_t absmax_count(int64_t weights) {
  return ceil_div(weights, kQuantBlock);
}

Result<std::vector<ParamSpec>> dequantize_4bit_params(const OpCall& call) {
  const int64_t out = call.attrs.get_int("out_features");
  const int64_t in = call.attrs.get_int("in_features");
  if (out < 1 || in < 1)
    return invalid_argument("a 4-bit weight needs at least one row and column");
  const std::optional<int64_t> n = checked_mul(out, in);
  if (!n) return out_of_range(fmt::format("a {} x {} weight overflows", out, in));
  const int64_t blocks = absmax_count(*n);
  std::vector<ParamSpec> p{{"weight", {ceil_div(*n, 2), 1}, false, DType::kUInt8, false, 2}};
  if (call.attrs.get_bool("double_quant")) {
    p.push_back({"weight.absmax", {blocks}, true, DType::kUInt8});
    p.push_back({"weight.nested_absmax", {ceil_div(blocks, kNestedBlock)}, true, DType::kFloat32});
    p.push_back({"weight.nested_quant_map", {kDynamicMapEntries}, true, DType::kFloat32});
    p.push_back({"weight.offset", {}, true, DType::kFloat32});
  } else {
    p.push_back({"weight.absmax", {blocks}, true, DType::kFloat32});
  }
  p.push_back({"weight.quant_map", {kCodeBookEntries}, true, DType::kFloat32});
  return p;
}

Status dequantize_4bit_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const std::optional<DType> dtype = parse_dtype(call.attrs.get_string("dtype"));
  if (!dtype || !is_floating(*dtype))
    return invalid_argument("dequantize_4bit needs a float dtype");
  const int64_t rows = call.attrs.get_int("out_features");
  const int64_t cols = call.attrs.get_int("in_features");
  // The nested absmax, dequantized into fp32 first and freed when the weight is made.
  if (call.attrs.get_bool("double_quant")) {
    out.push_back(OutputSpec::aux({absmax_count(rows * cols)}, DType::kFloat32));
  }
  out.insert(out.begin(), OutputSpec::aux({rows, cols}, *dtype));
  return {};
}

Status matmul_4bit_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  TF_RETURN_IF_ERROR(same_dtype(call, 0, 1));
  const Value& x = call.in(0);
  const Dims& w = call.in(1).shape;
  if (w.size() != 2 || x.shape.back() != w[1]) {
    return invalid_argument(fmt::format("input {} does not match the 4-bit weight {}",
                                        shape_string(x.shape), shape_string(w)));
  }
  Dims shape = x.shape;
  shape.back() = w[0];
  out.push_back(OutputSpec::fresh(std::move(shape), x.dtype));
  return {};
}

// The input's gradient: grad_output @ dequantize_4bit(weight), with the absmax and the weight
// made again first.
BackwardSpec matmul_4bit_backward(const OpCall& call) {
  BackwardSpec spec;
  if (!call.requires_grad(0)) return spec;
  spec.grads.push_back({0, -1});
  const Value& w = call.in(1);
  const int64_t weights = checked_numel(w.shape).value_or(0);
  if (call.attrs.get_bool("double_quant")) {
    spec.scratch.push_back(absmax_count(weights) * dtype_bytes(DType::kFloat32));
  }
  spec.scratch.push_back(weights * dtype_bytes(w.dtype));
  return spec;
}

// A Linear's product: the rows of x (all leading dims folded) times W^T, W being input 1.
GemmShape rows_gemm(const OpCall& c, const Dims& out) {
  GemmShape g = product(out, c.in(0).shape.back(), 0, 1);
  g.m *= g.batch;
  g.batch = 1;
  return g;
}

OpSchema matrix_schema(std::string_view name, std::string_view doc, int inputs) {
  OpSchema s;
  s.name = name;
  s.family = "linear";
  s.doc = doc;
  s.min_inputs = inputs;
  s.max_inputs = inputs;
  s.autocast = Autocast::kLower;
  s.workspace = no_workspace;
  s.uses_cublas = true;
  return s;
}

}  // namespace

void add_linear_ops(std::vector<OpSchema>& ops) {
  OpSchema linear = matrix_schema(
      "linear", "y = x W^T + b (nn.Linear); keeps x if W trains and W if x needs a gradient", 1);
  linear.attrs = {{"out_features", AttrKind::kInt, std::nullopt, "output features"},
                  {"bias", AttrKind::kBool, AttrValue{true}, "learnable bias"}};
  linear.params = linear_params;
  linear.dense_grad = DenseGrad::kFoldRows;
  linear.first_ready_input = 2;
  linear.infer = linear_infer;
  linear.saved = linear_saved;
  // A folded copy of the input (output 1) is made before the product it feeds.
  linear.forward_steps = [](const OpCall& call) {
    std::vector<MemoryStep> steps;
    if (call.in(0).shape.size() >= 3 && fold_copies(call.in(0), call.requires_grad(1))) {
      steps = {{MemoryStep::Kind::kOutput, 1}, {MemoryStep::Kind::kOutput, 0}};
    }
    return steps;
  };
  linear.gemm = rows_gemm;
  // at::linear with a bias on a 2-D or contiguous input is addmm, which cuBLASLt runs with
  // its bias epilogue.
  // The bias's gradient sums the output's gradient over every row, a reduction that stages
  // partial sums on CUDA when the rows are many (device_rules.h, Note [Reductions' staging]).
  // Over more than two dims the input is folded into rows (a reshape), so its gradient is a
  // view of mm's result.
  // at::linear is addmm for a 2-D input with a bias (and, on 2.x, a contiguous one): the
  // gradients of mat1, mat2 and self in that order. Otherwise matmul then add_(bias): the
  // bias's first (its node runs first), then mm's mat2 before self.
  linear.backward = [](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    const Value& in = call.in(0);
    const Dims& x = in.shape;
    for (GradRule& rule : spec.grads) rule.view = rule.input == 0 && x.size() > 2;
    const bool addmm =
        call.has_input(2) &&
        (x.size() == 2 || (call.target.torch == TorchVersion::k2 && is_contiguous(x, in.strides)));
    if (!addmm) order_grads(spec, {2, 1, 0});
    if (!call.on_cuda() || !call.has_input(2)) return spec;
    const int64_t out = call.attrs.get_int("out_features");
    ReduceProblem r;
    r.outputs = out;
    r.inputs_per_output = checked_numel(Dims(x.begin(), x.end() - 1)).value_or(0);
    r.contiguous_inputs = false;
    r.itemsize = dtype_bytes(call.in(0).dtype);
    r.sm_count = call.target.sm_count;
    r.sm = call.target.sm;
    const ReduceScratch scratch = cuda_reduce_scratch(r);
    for (GradRule& rule : spec.grads) {
      if (rule.input == 2 && scratch.buffer > 0)
        rule.workspace = {scratch.buffer, scratch.semaphores};
    }
    return spec;
  };
  linear.uses_cublaslt = [](const OpCall& c) {
    const Value& x = c.in(0);
    return c.has_input(2) && (x.shape.size() == 2 || is_contiguous(x.shape, x.strides));
  };
  ops.push_back(std::move(linear));

  OpSchema matmul = matrix_schema(
      "matmul", "torch.matmul with broadcasting; keeps each operand (or its copy) as mm/bmm do", 2);
  matmul.infer = matmul_infer;
  matmul.saved = matmul_saved;
  matmul.gemm = [](const OpCall& c, const Dims& out) {
    return product(out, c.in(0).shape.back(), 0, 1);
  };
  matmul.backward = [](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    order_grads(spec, {1, 0});  // mm's and bmm's mat2, then self
    return spec;
  };
  ops.push_back(std::move(matmul));

  OpSchema bmm =
      matrix_schema("bmm", "batched matrix product; keeps each operand for the other", 2);
  bmm.infer = [](const OpCall& c, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(same_dtype(c, 0, 1));
    Dims shape;
    TF_RETURN_IF_ERROR(bmm_shapes(c.in(0), c.in(1), shape));
    out.push_back(OutputSpec::fresh(std::move(shape), c.in(0).dtype));
    return Status();
  };
  // Released in the order the generated node declares them, by name: mat2_, then self_.
  bmm.saved = [](const OpCall& c) {
    SavedList saved;
    if (c.requires_grad(0)) saved.push_back(saved_input(1));
    if (c.requires_grad(1)) saved.push_back(saved_input(0));
    return saved;
  };
  bmm.gemm = [](const OpCall& c, const Dims& out) { return product(out, c.in(0).shape[2], 0, 1); };
  bmm.backward = [](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    order_grads(spec, {1, 0});  // mat2, then self
    return spec;
  };
  ops.push_back(std::move(bmm));

  OpSchema baddbmm = matrix_schema(
      "baddbmm", "beta * input + alpha * (batch1 @ batch2); keeps batch1 and batch2", 3);
  baddbmm.attrs = {{"beta", AttrKind::kFloat, AttrValue{1.0}, "scale of input"},
                   {"alpha", AttrKind::kFloat, AttrValue{1.0}, "scale of the product"}};
  baddbmm.infer = [](const OpCall& c, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(same_dtype(c, 1, 2));
    Dims shape;
    TF_RETURN_IF_ERROR(bmm_shapes(c.in(1), c.in(2), shape));
    TF_ASSIGN_OR_RETURN(Dims b, broadcast_shapes(c.in(0).shape, shape));
    if (b != shape) {
      return invalid_argument(fmt::format("input {} does not broadcast to {}",
                                          shape_string(c.in(0).shape), shape_string(shape)));
    }
    out.push_back(OutputSpec::fresh(std::move(shape), c.in(1).dtype));
    return Status();
  };
  baddbmm.saved = [](const OpCall& c) {
    SavedList saved;
    if (c.requires_grad(2)) saved.push_back(saved_input(1));
    if (c.requires_grad(1)) saved.push_back(saved_input(2));
    return saved;
  };
  baddbmm.gemm = [](const OpCall& c, const Dims& out) {
    return product(out, c.in(1).shape[2], 1, 2);
  };
  baddbmm.backward = [](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    order_grads(spec, {1, 2, 0});  // batch1, batch2, self
    return spec;
  };
  ops.push_back(std::move(baddbmm));

  OpSchema dequantize;
  dequantize.name = "dequantize_4bit";
  dequantize.family = "linear";
  dequantize.doc =
      "bitsandbytes' 4-bit weight (Params4bit and its QuantState) dequantized for one product: "
      "the weight in `dtype`, and with double_quant the fp32 absmax made first";
  dequantize.min_inputs = 0;
  dequantize.max_inputs = 0;
  dequantize.differentiable = false;
  dequantize.attrs = {
      {"out_features", AttrKind::kInt, std::nullopt, "weight rows"},
      {"in_features", AttrKind::kInt, std::nullopt, "weight columns"},
      {"dtype", AttrKind::kString, std::nullopt, "the dtype the weight was loaded in"},
      {"double_quant", AttrKind::kBool, AttrValue{true}, "absmax quantized again (nested)"}};
  dequantize.params = dequantize_4bit_params;
  dequantize.infer = dequantize_4bit_infer;
  dequantize.saved = [](const OpCall&) { return SavedList{}; };
  dequantize.workspace = no_workspace;
  ops.push_back(std::move(dequantize));

  OpSchema mm4 = matrix_schema(
      "matmul_4bit",
      "bitsandbytes' MatMul4Bit: x @ W^T (+ b) with W dequantized; keeps neither, and backward "
      "dequantizes W again for x's gradient (W gets none)",
      2);
  mm4.autocast = Autocast::kUnchanged;
  mm4.attrs = {{"bias", AttrKind::kBool, AttrValue{false}, "a frozen bias"},
               {"double_quant", AttrKind::kBool, AttrValue{true}, "absmax quantized again"}};
  mm4.params = [](const OpCall& call) -> Result<std::vector<ParamSpec>> {
    std::vector<ParamSpec> p;
    if (call.attrs.get_bool("bias")) p.push_back({"bias", {call.in(1).shape[0]}});
    return p;
  };
  mm4.infer = matmul_4bit_infer;
  mm4.saved = [](const OpCall&) { return SavedList{}; };
  mm4.backward = matmul_4bit_backward;
  mm4.gemm = [](const OpCall& c, const Dims& out) {
    GemmShape g = rows_gemm(c, out);
    g.operands = 0b01;  // only x gets a gradient
    return g;
  };
  ops.push_back(std::move(mm4));

  // Hugging Face transformers' Conv1D (GPT-2): addmm(b, x.view(-1, in), W) with W stored as
  // (in, out).
  OpSchema lt = matrix_schema(
      "linear_transposed",
      "y = x W + b with W stored (in, out) (transformers Conv1D); keeps x if W trains", 1);
  lt.attrs = {{"out_features", AttrKind::kInt, std::nullopt, "output features"}};
  lt.params = [](const OpCall& call) -> Result<std::vector<ParamSpec>> {
    TF_RETURN_IF_ERROR(expect_rank(call, 0, 2, 16, "input"));
    const int64_t out = call.attrs.get_int("out_features");
    if (out < 1) return invalid_argument("out_features must be at least 1");
    return std::vector<ParamSpec>{{"weight", {call.in(0).shape.back(), out}}, {"bias", {out}}};
  };
  lt.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    TF_RETURN_IF_ERROR(expect_floating(call, 0));
    TF_RETURN_IF_ERROR(same_dtype(call, 0, 1));
    const Value& x = call.in(0);
    if (!view_strides(x.shape, x.strides, folded_shape(x.shape))) {
      return invalid_argument("Conv1D views its input as 2-D, which needs a contiguous input");
    }
    Dims shape = x.shape;
    shape.back() = call.in(1).shape[1];
    out.push_back(OutputSpec::fresh(std::move(shape), x.dtype));
    return Status();
  };
  lt.gemm = rows_gemm;
  // addmm with its 1-D bias runs through cuBLASLt's bias epilogue, as Linear's does (Note
  // [cuBLASLt's workspace]); the input is contiguous, or infer refuses it.
  lt.uses_cublaslt = [](const OpCall&) { return true; };
  lt.saved = [](const OpCall& c) {
    SavedList saved;
    if (c.requires_grad(1)) saved.push_back(saved_input(0));
    if (c.requires_grad(0)) saved.push_back(saved_input(1));
    return saved;
  };
  ops.push_back(std::move(lt));
}

}  // namespace trainfit
