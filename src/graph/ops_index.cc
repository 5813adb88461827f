// Selection by value or by index: topk, advanced indexing (x[idx] along consecutive dims) and
// index_add_. A mixture-of-experts layer routes tokens with these.
//
// autograd (derivatives.yaml): topk keeps its int64 indices, and its backward scatters into
// zeros of the input's shape; indexing keeps the index tensors, and its backward accumulates into
// zeros of the input's shape (index_put_ with accumulate, which sorts the indices on CUDA);
// index_add_ keeps the index and the source (its gradient is grad.index_select(dim, index),
// expanded as the source), and hands the gradient through to the tensor it wrote into.
#include <fmt/format.h>

#include "base/size_math.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

int64_t rank_of(const Value& v) {
  return static_cast<int64_t>(v.shape.size());
}

Status topk_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(const int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  const int64_t k = call.attrs.get_int("k");
  const int64_t size = x.shape[static_cast<size_t>(dim)];
  if (k < 0 || k > size) {
    return invalid_argument(fmt::format("topk k={} is out of range for a dim of {}", k, size));
  }
  Dims shape = x.shape;
  shape[static_cast<size_t>(dim)] = k;
  out.push_back(OutputSpec::fresh(shape, x.dtype));
  OutputSpec indices = OutputSpec::fresh(shape, DType::kInt64);
  indices.differentiable = false;
  out.push_back(std::move(indices));
  return {};
}

// x[i0, i1, ...] with 1-D int64 index tensors of one length n on dims dim, dim + 1, ...: those
// dims become one of size n (x[None, idx] is unsqueeze(0), then dim=1).
Status index_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  const size_t indexed = call.inputs.size() - 1;
  TF_ASSIGN_OR_RETURN(const int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  if (static_cast<size_t>(dim) + indexed > x.shape.size()) {
    return invalid_argument(fmt::format("{} index tensors from dim {} do not fit a {}", indexed,
                                        dim, shape_string(x.shape)));
  }
  int64_t n = -1;
  for (size_t i = 1; i <= indexed; ++i) {
    const Value& idx = call.in(i);
    if (idx.dtype != DType::kInt64 || idx.shape.size() != 1 || (n >= 0 && idx.shape[0] != n)) {
      return invalid_argument(
          fmt::format("index tensors must be 1-D int64 of one length, got {} {}",
                      dtype_name(idx.dtype), shape_string(idx.shape)));
    }
    n = idx.shape[0];
  }
  Dims shape(x.shape.begin(), x.shape.begin() + dim);
  shape.push_back(n);
  shape.insert(shape.end(), x.shape.begin() + dim + static_cast<int64_t>(indexed), x.shape.end());
  out.push_back(OutputSpec::fresh(std::move(shape), x.dtype));
  return {};
}

Status index_add_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& self = call.in(0);
  const Value& index = call.in(1);
  const Value& source = call.in(2);
  TF_ASSIGN_OR_RETURN(const int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(self)));
  Dims expected = self.shape;
  expected[static_cast<size_t>(dim)] = index.shape.empty() ? 0 : index.shape[0];
  if (index.dtype != DType::kInt64 || index.shape.size() != 1 || source.shape != expected) {
    return invalid_argument(fmt::format("index_add_ of a {} source at a {} index into {}",
                                        shape_string(source.shape), shape_string(index.shape),
                                        shape_string(self.shape)));
  }
  out.push_back(OutputSpec::alias(0, self.shape, self.strides, self.dtype));
  return {};
}

}  // namespace

void add_index_ops(std::vector<OpSchema>& ops) {
  OpSchema topk;
  topk.name = "topk";
  topk.family = "index";
  topk.doc =
      "the k largest values along dim and their int64 indices (torch.topk); keeps the indices";
  topk.attrs = {{"k", AttrKind::kInt, std::nullopt, "how many"},
                {"dim", AttrKind::kInt, AttrValue{int64_t{-1}}, "along which dim"}};
  topk.infer = topk_infer;
  topk.saved = [](const OpCall&) { return SavedList{saved_output(1)}; };
  topk.workspace = no_workspace;
  ops.push_back(std::move(topk));

  OpSchema index;
  index.name = "index";
  index.family = "index";
  index.doc =
      "x[i0, i1, ...] with int64 index tensors on consecutive dims (a gather); keeps the indices";
  index.attrs = {{"dim", AttrKind::kInt, AttrValue{int64_t{0}}, "first indexed dim"}};
  index.max_inputs = 8;
  index.infer = index_infer;
  index.saved = [](const OpCall& call) {
    SavedList saved;
    for (size_t i = 1; i < call.inputs.size(); ++i)
      saved.push_back(saved_input(static_cast<int>(i)));
    return saved;
  };
  index.workspace = no_workspace;
  // index_put_ with accumulate into zeros of x's shape; on CUDA it first sorts the linearized
  // indices (the linear index, its sorted copy and the permutation: three int64 vectors).
  index.backward = [](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    if (call.on_cuda() && call.inputs.size() > 1) {
      spec.workspace_bytes = 3 * checked_numel(call.in(1).shape).value_or(0) * 8;
    }
    return spec;
  };
  // The rows it gathers and the indices, not the whole input.
  index.read_bytes = [](const OpCall& call, const Dims& out) {
    int64_t bytes = checked_numel(out).value_or(0) * dtype_bytes(call.in(0).dtype);
    for (size_t i = 1; i < call.inputs.size(); ++i) {
      bytes += checked_numel(call.in(i).shape).value_or(0) * 8;
    }
    return bytes;
  };
  ops.push_back(std::move(index));

  OpSchema index_add;
  index_add.name = "index_add";
  index_add.family = "index";
  index_add.doc = "self.index_add_(dim, index, source) in place; keeps the index and the source";
  index_add.attrs = {
      {"dim", AttrKind::kInt, AttrValue{int64_t{0}}, "dim of self the index runs along"}};
  index_add.min_inputs = 3;
  index_add.max_inputs = 3;
  index_add.infer = index_add_infer;
  index_add.saved = [](const OpCall& call) {
    return call.requires_grad(2) ? SavedList{saved_input(1), saved_input(2)} : SavedList{};
  };
  index_add.workspace = no_workspace;
  // self's gradient is the incoming one; the source's, grad.index_select(dim, index), is new.
  index_add.backward = [](const OpCall& call) {
    BackwardSpec spec;
    if (call.requires_grad(0)) spec.grads.push_back({0, 0, true});
    if (call.requires_grad(2)) spec.grads.push_back({2});
    return spec;
  };
  ops.push_back(std::move(index_add));
}

}  // namespace trainfit
