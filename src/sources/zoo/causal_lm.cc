#include "sources/zoo/causal_lm.h"

#include <string>

namespace trainfit {

ValueId causal_lm_loss(GraphBuilder& b, ValueId logits, ValueId labels, int64_t vocab) {
  auto scope = b.module("loss", "ForCausalLMLoss");
  if (b.ok() && b.value(logits).dtype != DType::kFloat32) {
    logits = b.call1("to_copy", {logits}, {{"dtype", std::string("float32")}});
  }
  ValueId shifted = b.call1("pad", {labels}, {{"pads", Dims{0, 1}}, {"value", -100.0}});
  shifted = b.call1("slice", {shifted}, {{"dim", int64_t{1}}, {"start", int64_t{1}}});
  shifted = b.call1("contiguous", {shifted});
  const ValueId flat_logits = b.call1("view", {logits}, {{"shape", Dims{-1, vocab}}});
  const ValueId flat_labels = b.call1("view", {shifted}, {{"shape", Dims{-1}}});
  return b.call1("cross_entropy", {flat_logits, flat_labels});
}

}  // namespace trainfit
