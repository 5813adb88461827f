// Reductions: sum and mean over dims (all dims when none are given).
//
// autograd: sum keeps nothing. mean over dims keeps its input on PyTorch 1.13 (its formula
// reads self.numel(), which the 1.13 code generator saves as the whole tensor) and nothing on
// 2.x; mean over all elements keeps nothing on either (measured in the op cases).
#include <fmt/format.h>

#include "graph/op_registry.h"

namespace trainfit {
namespace {

Status reduce_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  const auto rank = static_cast<int64_t>(x.shape.size());
  const Dims& dims = call.attrs.get_ints("dims");
  const bool keepdim = call.attrs.get_bool("keepdim");
  std::vector<bool> reduced(x.shape.size(), dims.empty());
  for (int64_t d : dims) {
    TF_ASSIGN_OR_RETURN(int64_t w, wrap_dim(d, rank));
    reduced[static_cast<size_t>(w)] = true;
  }
  Dims shape;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!reduced[i])
      shape.push_back(x.shape[i]);
    else if (keepdim)
      shape.push_back(1);
  }
  // Summing a bool or integer tensor accumulates in int64.
  DType dtype = is_floating(x.dtype) ? x.dtype : DType::kInt64;
  if (const std::string& name = call.attrs.get_string("dtype"); !name.empty()) {
    const auto d = parse_dtype(name);
    if (!d) return invalid_argument(fmt::format("unknown dtype '{}'", name));
    dtype = *d;
  }
  out.push_back(OutputSpec::fresh(std::move(shape), dtype));
  return {};
}

OpSchema reduce_schema(std::string_view name, std::string_view doc) {
  OpSchema s;
  s.name = name;
  s.family = "reduction";
  s.doc = doc;
  s.attrs = {{"dims", AttrKind::kInts, AttrValue{Dims{}}, "dims to reduce (empty: all)"},
             {"keepdim", AttrKind::kBool, AttrValue{false}, "keep reduced dims as size 1"},
             {"dtype", AttrKind::kString, AttrValue{std::string()}, "accumulate and return dtype"}};
  s.autocast = Autocast::kFp32Output;
  s.cpu_autocast = Autocast::kUnchanged;  // not on the CPU's fp32 list
  s.compute_dtype_attr = "dtype";
  s.infer = reduce_infer;
  s.workspace = no_workspace;
  return s;
}

}  // namespace

void add_reduction_ops(std::vector<OpSchema>& ops) {
  OpSchema sum = reduce_schema("sum", "sum over dims; keeps nothing");
  sum.saved = [](const OpCall&) { return SavedList{}; };
  sum.backward = alias_backward;  // grad.expand(input shape): a view
  sum.grad_is_view = true;
  ops.push_back(std::move(sum));
  OpSchema mean =
      reduce_schema("mean", "mean over dims; keeps its input on PyTorch 1.13 when dims are given");
  mean.saved = [](const OpCall& call) {
    if (!call.torch2() && !call.attrs.get_ints("dims").empty()) return SavedList{saved_input(0)};
    return SavedList{};
  };
  mean.infer = [](const OpCall& call, std::vector<OutputSpec>& out) {
    if (!is_floating(call.in(0).dtype) && call.attrs.get_string("dtype").empty()) {
      return invalid_argument(
          fmt::format("mean of a {} tensor has no floating dtype", dtype_name(call.in(0).dtype)),
          "convert it to float first, or pass dtype");
    }
    return reduce_infer(call, out);
  };
  ops.push_back(std::move(mean));
}

}  // namespace trainfit
