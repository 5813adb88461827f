#include "sources/zoo/causal_lm.h"

#include <string>
#include <utility>

#include "sources/zoo/nn.h"

namespace trainfit {
namespace {

// The labels padded with -100, and shifted by one: token t predicts label t + 1.
std::pair<ValueId, ValueId> shift_labels(GraphBuilder& b, ValueId labels) {
  const ValueId padded = b.call1("pad", {labels}, {{"pads", Dims{0, 1}}, {"value", -100.0}});
  const ValueId shifted = b.call1("slice", {padded}, {{"dim", int64_t{1}}, {"start", int64_t{1}}});
  return {padded, b.call1("contiguous", {shifted})};
}

}  // namespace

ValueId causal_lm_loss(GraphBuilder& b, ValueId logits, ValueId labels, int64_t vocab,
                       bool shift_logits) {
  auto scope = b.module("loss", "ForCausalLMLoss");
  if (b.ok() && b.value(logits).dtype != DType::kFloat32) {
    logits = b.call1("to_copy", {logits}, {{"dtype", std::string("float32")}});
  }
  const ValueId upcast = logits;  // 4.48's local until the function returns
  ValueId shifted = kNone;
  if (shift_logits) {
    logits = b.call1("contiguous",
                     {b.call1("slice", {logits}, {{"dim", int64_t{1}}, {"end", int64_t{-1}}})});
    shifted = b.call1("contiguous",
                      {b.call1("slice", {labels}, {{"dim", int64_t{1}}, {"start", int64_t{1}}})});
  } else {
    shifted = shift_labels(b, labels).second;
  }
  const ValueId flat_logits = b.call1("view", {logits}, {{"shape", Dims{-1, vocab}}});
  const ValueId flat_labels = b.call1("view", {shifted}, {{"shape", Dims{-1}}});
  const ValueId loss = b.call1("cross_entropy", {flat_logits, flat_labels});
  if (shift_logits) nn::hold(b, {upcast});
  return loss;
}

ValueId liger_causal_lm_loss(GraphBuilder& b, ValueId hidden, ValueId labels, ValueId weight,
                             double softcap) {
  auto scope = b.module("loss", "LigerForCausalLMLoss");
  if (!b.ok()) return kNone;
  const auto [padded, shifted] = shift_labels(b, labels);
  const int64_t width = b.dim(hidden, -1);
  const ValueId flat_hidden = b.call1("view", {hidden}, {{"shape", Dims{-1, width}}});
  const ValueId flat_labels = b.call1("view", {shifted}, {{"shape", Dims{-1}}});
  const ValueId loss = b.call1("fused_linear_cross_entropy", {flat_hidden, flat_labels},
                               {{"vocab_size", b.dim(weight, 0)}, {"softcap", softcap}}, {weight});
  // `labels`, rebound to the padded labels, lives until the function returns; the model then
  // returns the loss, and no logits, to the loop (its last output).
  nn::hold(b, {padded, loss});
  return loss;
}

}  // namespace trainfit
