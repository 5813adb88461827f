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
  linear.first_ready_input = 2;
  linear.infer = linear_infer;
  linear.saved = linear_saved;
  // The rows of x (all leading dims) times W^T; W is input 1.
  linear.gemm = [](const OpCall& c, const Dims& out) {
    GemmShape g = product(out, c.in(0).shape.back(), 0, 1);
    g.m *= g.batch;
    g.batch = 1;
    return g;
  };
  ops.push_back(std::move(linear));

  OpSchema matmul = matrix_schema(
      "matmul", "torch.matmul with broadcasting; keeps each operand (or its copy) as mm/bmm do", 2);
  matmul.infer = matmul_infer;
  matmul.saved = matmul_saved;
  matmul.gemm = [](const OpCall& c, const Dims& out) {
    return product(out, c.in(0).shape.back(), 0, 1);
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
  bmm.saved = [](const OpCall& c) {
    SavedList saved;
    if (c.requires_grad(1)) saved.push_back(saved_input(0));
    if (c.requires_grad(0)) saved.push_back(saved_input(1));
    return saved;
  };
  bmm.gemm = [](const OpCall& c, const Dims& out) { return product(out, c.in(0).shape[2], 0, 1); };
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
  ops.push_back(std::move(baddbmm));

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
  lt.gemm = [](const OpCall& c, const Dims& out) {
    GemmShape g = product(out, c.in(0).shape.back(), 0, 1);
    g.m *= g.batch;
    g.batch = 1;
    return g;
  };
  lt.saved = [](const OpCall& c) {
    SavedList saved;
    if (c.requires_grad(1)) saved.push_back(saved_input(0));
    if (c.requires_grad(0)) saved.push_back(saved_input(1));
    return saved;
  };
  ops.push_back(std::move(lt));
}

}  // namespace trainfit
