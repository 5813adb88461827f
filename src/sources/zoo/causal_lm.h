// What Hugging Face transformers' causal language models share in training: the loss over the
// vocabulary (ForCausalLMLoss).
#pragma once

#include "graph/builder.h"

namespace trainfit {

// transformers' ForCausalLMLoss: the logits upcast to fp32 (a copy unless they are fp32), the
// labels padded with -100 and shifted by one, cross-entropy over the flattened tokens. Runs in
// a module "loss" of the current one. shift_logits: as transformers 4.48 and earlier, the last
// position's logits dropped instead (logits[..., :-1, :].contiguous(), a copy) and the labels'
// first.
ValueId causal_lm_loss(GraphBuilder& b, ValueId logits, ValueId labels, int64_t vocab,
                       bool shift_logits = false);

// Liger-Kernel 0.5.5's LigerForCausalLMLoss, which its lce_forward calls in training instead of
// lm_head and ForCausalLMLoss: the labels padded and shifted as above, the hidden states
// flattened to (tokens, hidden), then fused_linear_cross_entropy with the head's `weight`
// (the logits made and consumed a chunk of tokens at a time; `softcap` is applied inside).
ValueId liger_causal_lm_loss(GraphBuilder& b, ValueId hidden, ValueId labels, ValueId weight,
                             double softcap);

}  // namespace trainfit
