// Embedding lookup (nn.Embedding).
//
// autograd keeps only the int64 indices (derivatives.yaml `embedding`). Its backward builds a
// dense gradient of the whole table unless sparse=True.
#include <fmt/format.h>

#include "base/size_math.h"
#include "graph/op_registry.h"

namespace trainfit {

void add_embedding_ops(std::vector<OpSchema>& ops) {
  OpSchema s;
  s.name = "embedding";
  s.family = "embedding";
  s.doc = "rows of a learned table (nn.Embedding); keeps the int64 indices";
  s.attrs = {
      {"num_embeddings", AttrKind::kInt, std::nullopt, "rows of the table"},
      {"embedding_dim", AttrKind::kInt, std::nullopt, "width of each row"},
      {"padding_idx", AttrKind::kInt, AttrValue{int64_t{-1}}, "row without gradient (-1: none)"}};
  s.params = [](const OpCall& call) -> Result<std::vector<ParamSpec>> {
    const int64_t rows = call.attrs.get_int("num_embeddings");
    const int64_t dim = call.attrs.get_int("embedding_dim");
    if (rows < 1 || dim < 1) return invalid_argument("embedding needs positive sizes");
    return std::vector<ParamSpec>{{"weight", {rows, dim}}};
  };
  s.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    const Value& idx = call.in(0);
    if (idx.dtype != DType::kInt64 && idx.dtype != DType::kInt32) {
      return invalid_argument(
          fmt::format("embedding indices must be int64 or int32, got {}", dtype_name(idx.dtype)));
    }
    Dims shape = idx.shape;
    shape.push_back(call.in(1).shape[1]);
    out.push_back(OutputSpec::fresh(std::move(shape), call.in(1).dtype));
    return Status();
  };
  s.saved = [](const OpCall&) { return SavedList{saved_input(0)}; };
  // The indices and the rows they pick, not the whole table.
  s.read_bytes = [](const OpCall& call, const Dims& out) {
    const int64_t indices = checked_numel(call.in(0).shape).value_or(0);
    return indices * dtype_bytes(call.in(0).dtype) +
           checked_numel(out).value_or(0) * dtype_bytes(call.in(1).dtype);
  };
  s.workspace = no_workspace;
  ops.push_back(std::move(s));
}

}  // namespace trainfit
