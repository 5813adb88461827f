#include "graph/op_schema.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainfit {

OutputSpec OutputSpec::fresh(Dims shape, DType dtype) {
  OutputSpec s;
  s.strides = contiguous_strides(shape);
  s.shape = std::move(shape);
  s.dtype = dtype;
  s.differentiable = is_floating(dtype);
  return s;
}

OutputSpec OutputSpec::fresh_strided(Dims shape, Dims strides, DType dtype) {
  OutputSpec s = fresh(std::move(shape), dtype);
  s.strides = std::move(strides);
  return s;
}

OutputSpec OutputSpec::alias(int input, Dims shape, Dims strides, DType dtype) {
  OutputSpec s;
  s.shape = std::move(shape);
  s.strides = std::move(strides);
  s.dtype = dtype;
  s.alias_of = input;
  s.differentiable = is_floating(dtype);
  return s;
}

OutputSpec OutputSpec::aux(Dims shape, DType dtype) {
  OutputSpec s = fresh(std::move(shape), dtype);
  s.differentiable = false;
  return s;
}

double GemmShape::flops() const {
  return 2.0 * count * static_cast<double>(batch) * static_cast<double>(m) *
         static_cast<double>(n) * static_cast<double>(k);
}

BackwardSpec backward_of(const OpSchema& schema, const OpCall& call) {
  if (schema.backward) return schema.backward(call);
  BackwardSpec spec;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    if (call.requires_grad(i)) spec.grads.push_back({static_cast<int>(i), -1});
  }
  return spec;
}

BackwardSpec alias_backward(const OpCall& call) {
  BackwardSpec spec;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    if (call.requires_grad(i)) spec.grads.push_back({static_cast<int>(i), 0});
  }
  return spec;
}

void order_grads(BackwardSpec& spec, std::initializer_list<int> order) {
  auto rank = [&](const GradRule& r) {
    const auto* at = std::find(order.begin(), order.end(), r.input);
    return at - order.begin();
  };
  std::stable_sort(spec.grads.begin(), spec.grads.end(),
                   [&](const GradRule& a, const GradRule& b) { return rank(a) < rank(b); });
}

Result<Dims> spatial_attr(const Attrs& attrs, std::string_view name, size_t n) {
  const AttrValue* v = attrs.find(name);
  if (v == nullptr) return invalid_argument(fmt::format("missing attribute {}", name));
  if (std::holds_alternative<int64_t>(*v)) return Dims(n, std::get<int64_t>(*v));
  if (!std::holds_alternative<Dims>(*v)) {
    return invalid_argument(fmt::format("attribute {} must be an int or a list of {}", name, n));
  }
  const Dims& d = std::get<Dims>(*v);
  if (d.size() == 1) return Dims(n, d[0]);
  if (d.size() != n) {
    return invalid_argument(
        fmt::format("attribute {} has {} values; this op needs {}", name, d.size(), n));
  }
  return d;
}

int64_t no_workspace(const OpCall&) {
  return 0;
}

Status expect_rank(const OpCall& call, size_t input, size_t min_rank, size_t max_rank,
                   std::string_view what) {
  const size_t rank = call.in(input).shape.size();
  if (rank < min_rank || rank > max_rank) {
    const std::string want = min_rank == max_rank ? fmt::format("{}-D", min_rank)
                                                  : fmt::format("{}-D to {}-D", min_rank, max_rank);
    return invalid_argument(
        fmt::format("{} must be {}, got shape {}", what, want, shape_string(call.in(input).shape)));
  }
  return {};
}

Status expect_floating(const OpCall& call, size_t input) {
  if (!is_floating(call.in(input).dtype)) {
    return invalid_argument(fmt::format("input {} must be floating point, got {}", input,
                                        dtype_name(call.in(input).dtype)));
  }
  return {};
}

}  // namespace trainfit
