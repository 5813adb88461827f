// What Hugging Face transformers' causal language models share in training: the loss over the
// vocabulary (ForCausalLMLoss).
#pragma once

#include "graph/builder.h"

namespace trainfit {

// transformers' ForCausalLMLoss: the logits upcast to fp32 (a copy unless they are fp32), the
// labels padded with -100 and shifted by one, cross-entropy over the flattened tokens. Runs in
// a module "loss" of the current one.
ValueId causal_lm_loss(GraphBuilder& b, ValueId logits, ValueId labels, int64_t vocab);

}  // namespace trainfit
