// Losses: cross_entropy (log_softmax + nll_loss), nll_loss, mse_loss, l1_loss.
//
// autograd: nll_loss keeps its input (the log-probabilities, which log_softmax keeps too),
// the target and a 0-dim total_weight; mse_loss keeps input and target; l1_loss is
// (input - target).abs() reduced, and abs keeps the difference.
#include <fmt/format.h>

#include "graph/builder.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

const AttrSpec kReduction{"reduction", AttrKind::kString, AttrValue{std::string("mean")},
                          "'mean', 'sum' or 'none'"};

Result<Dims> reduced_shape(const OpCall& call, const Dims& elementwise) {
  const std::string& r = call.attrs.get_string("reduction");
  if (r == "mean" || r == "sum") return Dims{};
  if (r == "none") return elementwise;
  return invalid_argument(fmt::format("reduction must be 'mean', 'sum' or 'none', got '{}'", r));
}

Status nll_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  const Value& x = call.in(0);
  const Value& target = call.in(1);
  if (x.shape.size() != 2) {
    return unsupported(fmt::format("nll_loss takes (N, C) scores, got {}", shape_string(x.shape)),
                       "flatten the other dims into N first");
  }
  if (target.shape != Dims{x.shape[0]} || is_floating(target.dtype)) {
    return invalid_argument(fmt::format("target must be N={} class indices, got {} {}", x.shape[0],
                                        dtype_name(target.dtype), shape_string(target.shape)));
  }
  TF_ASSIGN_OR_RETURN(Dims shape, reduced_shape(call, {x.shape[0]}));
  out.push_back(OutputSpec::fresh(std::move(shape), x.dtype));
  out.push_back(OutputSpec::aux({}, x.dtype));  // total_weight
  return {};
}

Status pair_loss_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  if (call.in(0).shape != call.in(1).shape) {
    return invalid_argument(fmt::format("input {} and target {} differ in shape",
                                        shape_string(call.in(0).shape),
                                        shape_string(call.in(1).shape)));
  }
  TF_ASSIGN_OR_RETURN(Dims shape, reduced_shape(call, call.in(0).shape));
  out.push_back(OutputSpec::fresh(std::move(shape), call.in(0).dtype));
  return {};
}

std::vector<ValueId> reduce(GraphBuilder& b, ValueId x, const std::string& reduction) {
  if (reduction == "none") return {x};
  return {b.call1(reduction, {x})};
}

}  // namespace

void add_loss_ops(std::vector<OpSchema>& ops) {
  OpSchema nll;
  nll.name = "nll_loss";
  nll.family = "loss";
  nll.doc = "negative log likelihood of class indices; keeps input, target, total_weight";
  nll.min_inputs = 2;
  nll.max_inputs = 2;
  nll.attrs = {kReduction,
               {"ignore_index", AttrKind::kInt, AttrValue{int64_t{-100}}, "ignored class"}};
  nll.autocast = Autocast::kFp32;
  nll.infer = nll_infer;
  nll.saved = [](const OpCall&) {
    return SavedList{saved_input(0), saved_input(1), saved_output(1)};
  };
  nll.workspace = no_workspace;
  ops.push_back(std::move(nll));

  OpSchema ce;
  ce.name = "cross_entropy";
  ce.family = "loss";
  ce.doc = "log_softmax over classes then nll_loss (nn.CrossEntropyLoss); keeps the log-probs";
  ce.min_inputs = 2;
  ce.max_inputs = 2;
  ce.attrs = {kReduction,
              {"ignore_index", AttrKind::kInt, AttrValue{int64_t{-100}}, "ignored class"},
              {"label_smoothing", AttrKind::kFloat, AttrValue{0.0}, "only 0 is modelled"}};
  ce.decompose = [](GraphBuilder& b, std::span<const ValueId> in, const Attrs& attrs) {
    if (attrs.get_float("label_smoothing") != 0.0) {
      b.fail(unsupported("cross_entropy with label_smoothing is not modelled"));
      return std::vector<ValueId>{kNone};
    }
    const ValueId logp = b.call1("log_softmax", {in[0]}, {{"dim", int64_t{1}}});
    return std::vector<ValueId>{b.call1("nll_loss", {logp, in[1]},
                                        {{"reduction", attrs.get_string("reduction")},
                                         {"ignore_index", attrs.get_int("ignore_index")}})};
  };
  ops.push_back(std::move(ce));

  OpSchema mse;
  mse.name = "mse_loss";
  mse.family = "loss";
  mse.doc = "mean squared error (nn.MSELoss); keeps input and target";
  mse.min_inputs = 2;
  mse.max_inputs = 2;
  mse.attrs = {kReduction};
  mse.autocast = Autocast::kFp32;
  mse.infer = pair_loss_infer;
  mse.saved = [](const OpCall&) { return SavedList{saved_input(0), saved_input(1)}; };
  mse.workspace = no_workspace;
  ops.push_back(std::move(mse));

  OpSchema l1;
  l1.name = "l1_loss";
  l1.family = "loss";
  l1.doc = "mean absolute error (nn.L1Loss): (input - target).abs(); keeps the difference";
  l1.min_inputs = 2;
  l1.max_inputs = 2;
  l1.attrs = {kReduction};
  l1.autocast = Autocast::kFp32;
  l1.decompose = [](GraphBuilder& b, std::span<const ValueId> in, const Attrs& attrs) {
    const std::string& r = attrs.get_string("reduction");
    if (r != "mean" && r != "sum" && r != "none") {
      b.fail(
          invalid_argument(fmt::format("reduction must be 'mean', 'sum' or 'none', got '{}'", r)));
      return std::vector<ValueId>{kNone};
    }
    return reduce(b, b.call1("abs", {b.call1("sub", {in[0], in[1]})}), r);
  };
  ops.push_back(std::move(l1));
}

}  // namespace trainfit
