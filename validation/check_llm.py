"""Decoder language models: trainfit's `llama` zoo model (the LlamaForCausalLM layout that
--hf-config builds for Llama, Mistral and Qwen2) against a PyTorch re-creation of transformers'
(validation/llama_reference.py) on CPU: its layers as 4.48 builds them, which later releases
keep, and the loss as 4.49 and later compute it (the labels padded); the cases that say
transformers=4.48 swap in 4.48's loss (the logits shifted by a copy). Under autocast the model
is in fp32 unless a case says dtype=bfloat16 (transformers 5's default load of a bf16 config).

Each case is a small decoder given as config.json fields, trained in full or with LoRA as peft adds
it (llama_reference.apply_lora: get_peft_model's layer, dtypes and trainable parameters). The parameter count must be exact, and
the peak of live tensor bytes over two training iterations (harness.training_peak: the loop holds
the model's output, here the loss, logits and cache, to the end of the step) must match
`trainfit estimate --model llama --set FIELD=VALUE ... --device-profile cpu --json` within 1%.
PyTorch 1.13 has no scaled_dot_product_attention, so attention is eager, as transformers falls
back to on 1.13.

    /usr/bin/python3 validation/check_llm.py --trainfit build/release/trainfit [--remeasure]
"""
import argparse
import gc

import torch

import llama_reference
from harness import (Measured, Report, freeze, run_trainfit, set_flags, sets_label,
                     training_peak)
from torch_models import Case

TOLERANCE = 0.01

# (config.json fields on top of llama_reference.config's small decoder, batch, sequence length,
# optimizer, precision, --freeze prefixes, LoRA: apply_lora's keywords or None[, gradient
# checkpointing of every layer: "reentrant" or "non-reentrant"])
CASES = [
    ({}, 2, 64, "adamw", "fp32", (), None),
    ({"use_cache": "false", "tie_word_embeddings": "true"}, 3, 48, "sgd", "fp32", (), None),
    # Qwen2's layout: biases on q, k and v; one key/value head per query head (no repeat).
    ({"qkv_bias": "true", "num_key_value_heads": "4"}, 2, 64, "adam", "fp32", (), None),
    # A vocabulary larger than the model, as in every real LLM: the logits dominate.
    ({"vocab_size": "8000", "num_key_value_heads": "1"}, 2, 96, "adamw", "fp32", (), None),
    # The whole model in bf16: the fp32 logits copy, RMSNorm's fp32 detour, the mask in bf16.
    ({"vocab_size": "4000"}, 2, 64, "adamw", "bf16", (), None),
    # Frozen embedding and first layer: what autograd keeps through frozen linears.
    ({}, 2, 64, "adamw", "fp32", ("model.embed_tokens", "model.layers.0"), None),
    # LoRA, peft's defaults (r=8 on q_proj and v_proj): nothing before the first adapter needs a
    # gradient, and each adapter keeps its input and its rank-r activation.
    ({}, 2, 64, "adamw", "fp32", (), {}),
    # Every Linear adapted, with lora_dropout: each adapter's dropout mask and output.
    ({"vocab_size": "4000"}, 2, 64, "adamw", "fp32", (),
     {"r": 16, "alpha": 32, "dropout": 0.05, "target": ("all-linear",)}),
    # A bf16 base: peft casts the adapters to fp32, and with them each input they see.
    ({"vocab_size": "4000"}, 2, 64, "adamw", "bf16", (),
     {"r": 4, "target": ("q_proj", "k_proj", "v_proj", "o_proj")}),
    # ... or keeps them in bf16 (get_peft_model(autocast_adapter_dtype=False)).
    ({"use_cache": "false"}, 2, 64, "adam", "bf16", (),
     {"r": 8, "dropout": 0.1, "target": ("all-linear",), "fp32_adapters": False}),
    # Qwen3's layout: RMSNorms on q and k, a head wider than hidden / heads; in full and with LoRA.
    ({"qk_norm": "true", "head_dim": "32", "vocab_size": "3000"}, 2, 64, "adamw", "fp32", (),
     None),
    ({"qk_norm": "true", "head_dim": "32"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "alpha": 16, "dropout": 0.05, "target": ("all-linear",)}),
    # Qwen2's biases on a frozen base, tied embeddings, SGD.
    ({"qkv_bias": "true", "tie_word_embeddings": "true"}, 3, 48, "sgd", "fp32", (),
     {"r": 2, "target": ("k_proj", "gate_proj", "down_proj")}),
    # QLoRA: every Linear but lm_head in 4 bits (bitsandbytes' Linear4bit), dequantized for each
    # product in forward and again in backward; the targets' results cloned (peft's
    # lora.Linear4bit). A bf16 base on peft's default targets, then every Linear with dropout.
    ({"vocab_size": "4000"}, 2, 64, "adamw", "bf16", (), {"r": 8, "alpha": 16, "quant": "nf4"}),
    ({"vocab_size": "4000", "use_cache": "false"}, 2, 64, "adamw", "bf16", (),
     {"r": 16, "dropout": 0.05, "target": ("all-linear",), "quant": "nf4"}),
    # Without double quantization (fp32 absmax), on an fp32 model.
    ({}, 2, 64, "adam", "fp32", (),
     {"r": 4, "target": ("q_proj", "o_proj", "up_proj"), "quant": "nf4", "double_quant": False}),
    # Qwen2's biases stay beside the 4-bit weights; Qwen3's RMSNorms on q and k.
    ({"qkv_bias": "true", "num_key_value_heads": "4"}, 3, 48, "sgd", "bf16", (),
     {"r": 8, "target": ("q_proj", "k_proj", "down_proj"), "quant": "fp4"}),
    ({"qk_norm": "true", "head_dim": "32"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "alpha": 16, "target": ("all-linear",), "quant": "nf4"}),
    # Gemma's layout: embeddings scaled by a CPU scalar, (1 + weight) norms in fp32, GELU, tied
    # embeddings, a head wider than hidden / heads; in fp32, in bf16 and under QLoRA.
    ({"gemma": "true", "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": "true",
      "head_dim": "32", "vocab_size": "3000"}, 2, 64, "adamw", "fp32", (), None),
    ({"gemma": "true", "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": "true",
      "num_key_value_heads": "1"}, 2, 64, "adamw", "bf16", (), None),
    ({"gemma": "true", "hidden_act": "gelu", "tie_word_embeddings": "true"}, 2, 64, "adamw",
     "bf16", (), {"r": 8, "target": ("all-linear",), "quant": "nf4"}),
    # Gemma 2's layout: Gemma's, with four norms a layer, soft-capped attention scores and
    # logits, and the even layers' windowed masks (a window shorter than the sequence); in fp32,
    # in bf16 on three layers with only the logits capped, with LoRA and under QLoRA.
    ({"gemma": "true", "gemma2": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "attn_logit_softcapping": "50", "final_logit_softcapping": "30",
      "sliding_window": "16", "head_dim": "32", "vocab_size": "3000"}, 2, 64, "adamw", "fp32", (),
     None),
    ({"gemma": "true", "gemma2": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "final_logit_softcapping": "30", "sliding_window": "32",
      "num_hidden_layers": "3", "num_key_value_heads": "1"}, 2, 64, "adamw", "bf16", (), None),
    ({"gemma": "true", "gemma2": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "attn_logit_softcapping": "50", "final_logit_softcapping": "30",
      "sliding_window": "48"}, 2, 64, "adamw", "bf16", (), {"r": 8, "alpha": 16}),
    ({"gemma": "true", "gemma2": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "attn_logit_softcapping": "50", "final_logit_softcapping": "30",
      "sliding_window": "16"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "target": ("all-linear",), "quant": "nf4"}),
    # One narrow head, long sequences and a 32-token vocabulary: the peak is in the forward,
    # at the windowed layer's mask add, where its two mask copies are alive (10.8% of it).
    ({"gemma": "true", "gemma2": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "sliding_window": "16", "vocab_size": "32",
      "num_hidden_layers": "1", "num_attention_heads": "1", "num_key_value_heads": "1",
      "hidden_size": "16", "intermediate_size": "16", "head_dim": "16", "use_cache": "false"},
     4, 256, "sgd", "fp32", (), None),
    # Gemma 3's layout: Gemma 2's layer with RMSNorms on the transposed q and k heads, the
    # embeddings scaled inside their module, a global layer every sliding_window_pattern-th, two
    # rotary tables remade for every layer, and masking_utils' masks (both made before the first
    # layer and kept to the forward's end). In fp32 on three layers (windowed, global, windowed),
    # in bf16 on two windowed layers, with LoRA and the logits soft-capped, with LoRA under
    # reentrant checkpointing, under QLoRA, and with Liger's loss, whose peak is in the final
    # norm. Then one narrow head over long sequences: the peak is in the forward, with both
    # (batch, 1, seq, seq) masks alive.
    ({"gemma": "true", "gemma3": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "sliding_window": "16", "sliding_window_pattern": "2",
      "num_hidden_layers": "3", "head_dim": "32", "vocab_size": "3000"}, 2, 64, "adamw", "fp32",
     (), None),
    ({"gemma": "true", "gemma3": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "sliding_window": "32", "num_key_value_heads": "1"}, 2, 64,
     "adamw", "bf16", (), None),
    ({"gemma": "true", "gemma3": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "sliding_window": "48", "sliding_window_pattern": "2",
      "final_logit_softcapping": "30"}, 2, 64, "adamw", "bf16", (), {"r": 8, "alpha": 16}),
    ({"gemma": "true", "gemma3": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "sliding_window": "32", "vocab_size": "32",
      "num_hidden_layers": "3", "sliding_window_pattern": "3"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "alpha": 16}, "reentrant"),
    ({"gemma": "true", "gemma3": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "sliding_window": "16", "sliding_window_pattern": "2"}, 2, 64,
     "adamw", "bf16", (), {"r": 8, "target": ("all-linear",), "quant": "nf4"}),
    ({"loss": "fused_linear_cross_entropy", "gemma": "true", "gemma3": "true",
      "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": "true", "sliding_window": "32",
      "sliding_window_pattern": "2", "vocab_size": "3000"}, 2, 64, "adamw", "bf16", (), {"r": 8}),
    ({"gemma": "true", "gemma3": "true", "hidden_act": "gelu_pytorch_tanh",
      "tie_word_embeddings": "true", "sliding_window": "16", "sliding_window_pattern": "2",
      "vocab_size": "32", "num_hidden_layers": "2", "num_attention_heads": "1",
      "num_key_value_heads": "1", "hidden_size": "16", "intermediate_size": "16", "head_dim": "16"},
     4, 256, "sgd", "fp32", (), None),
    # Phi-3's layout: q, k and v sliced from one qkv_proj, gate and up chunked from one
    # gate_up_proj, the rotated head concatenated back; in fp32, in bf16 with a quarter of each
    # head left unrotated (Phi-4-mini's 0.75) and residual dropout, with LoRA on the fused
    # projections, and under QLoRA.
    ({"phi3": "true", "vocab_size": "3000"}, 2, 64, "adamw", "fp32", (), None),
    ({"phi3": "true", "partial_rotary_factor": "0.75", "resid_pdrop": "0.1"}, 2, 64, "adamw",
     "bf16", (), None),
    ({"phi3": "true", "num_key_value_heads": "4"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "alpha": 16, "dropout": 0.05, "target": ("qkv_proj", "gate_up_proj")}),
    ({"phi3": "true", "partial_rotary_factor": "0.5"}, 2, 64, "adamw", "bf16", (),
     {"r": 16, "target": ("all-linear",), "quant": "nf4"}),
    # Mixtral's layout: experts in place of the MLP, the router's tokens spread evenly (see
    # llama_reference.SparseMoeBlock). Four experts, two per token, in fp32 with a small
    # vocabulary (the experts make the peak); three experts that share the tokens unevenly, with
    # router jitter, in bf16; LoRA on peft's defaults; QLoRA on every Linear.
    ({"num_local_experts": "4", "vocab_size": "500"}, 2, 64, "adamw", "fp32", (), None),
    ({"num_local_experts": "4", "vocab_size": "32", "intermediate_size": "512",
      "num_hidden_layers": "1"}, 2, 128, "sgd", "fp32", (), None),
    ({"num_local_experts": "3", "router_jitter_noise": "0.1", "use_cache": "false"}, 2, 64,
     "adamw", "bf16", (), None),
    ({"num_local_experts": "4"}, 2, 64, "adamw", "bf16", (), {"r": 8, "alpha": 16}),
    ({"num_local_experts": "4", "num_experts_per_tok": "1"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "target": ("all-linear",), "quant": "nf4"}),
    # prepare_model_for_kbit_training first: the embedding, norms and lm_head in fp32, so the
    # hidden states between the 4-bit layers are fp32 (and the logits need no fp32 copy).
    ({"vocab_size": "4000"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "alpha": 16, "quant": "nf4", "prepare": True}),
    ({"qk_norm": "true", "head_dim": "32", "use_cache": "false"}, 2, 64, "adamw", "bf16", (),
     {"r": 16, "dropout": 0.05, "target": ("all-linear",), "quant": "nf4", "prepare": True}),
    # Every layer under reentrant gradient checkpointing, transformers' default (use_cache off),
    # in full fine-tuning, with LoRA and with prepared QLoRA, where enable_input_require_grads
    # makes the embeddings' output a leaf that needs a gradient. With a 32-token vocabulary the
    # peak falls inside a layer's backward, where the recomputed output and its gradient are
    # still held: the non-reentrant figure is 1.3% (full) and 1.6% (LoRA) lower there. (Torch
    # 1.13's non-reentrant checkpoint cannot run these layers under the harness's dispatch mode:
    # it unpacks the Python scalar `* scaling` saves as a float.)
    ({}, 2, 64, "adamw", "fp32", (), None, "reentrant"),
    ({"vocab_size": "32"}, 2, 64, "adamw", "fp32", (), None, "reentrant"),
    ({"vocab_size": "32"}, 2, 64, "adamw", "bf16", (), {"r": 8, "alpha": 16}, "reentrant"),
    ({"vocab_size": "4000"}, 2, 64, "adamw", "bf16", (), {"r": 8, "alpha": 16}, "reentrant"),
    ({"vocab_size": "4000"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "alpha": 16, "quant": "nf4", "prepare": True}, "reentrant"),
    # The Trainer's bf16=True: the model in fp32 under autocast (CPU autocast lowers the products
    # as CUDA's does; the norms' and the loss's ops here run in fp32 either way). In full, with
    # LoRA, and under QLoRA with bnb_4bit_compute_dtype=bfloat16, where peft's lora.Linear4bit
    # casts neither the adapters' input nor their output under autocast (casting both would keep
    # 1.1% more), then prepared and checkpointed as the QLoRA notebooks do. With a 32-token
    # vocabulary the peak is in a layer: in lora_A(dropout(x)) the dropout's fp32 output stays
    # the caller's while autocast hands the product its bf16 copy.
    ({}, 2, 64, "adamw", "amp-bf16", (), None),
    ({"vocab_size": "32"}, 2, 64, "adamw", "amp-bf16", (),
     {"r": 8, "alpha": 16, "dropout": 0.1, "target": ("all-linear",)}),
    ({"vocab_size": "32"}, 2, 64, "adamw", "amp-bf16", (),
     {"r": 16, "dropout": 0.05, "target": ("all-linear",), "quant": "nf4"}),
    ({"vocab_size": "4000"}, 2, 64, "adamw", "amp-bf16", (),
     {"r": 16, "dropout": 0.05, "target": ("all-linear",), "quant": "nf4", "prepare": True},
     "reentrant"),
    # Wide layers and few tokens: the dequantized weights, not the activations, make the peak.
    ({"hidden_size": "256", "intermediate_size": "1024", "vocab_size": "500"}, 1, 16, "adamw",
     "bf16", (), {"r": 8, "target": ("all-linear",), "quant": "nf4"}),
    # Liger-Kernel's fused linear cross-entropy (its Triton kernel done in numpy, in place): the
    # logits made a chunk of tokens at a time and turned into their gradient at once, the
    # gradients saved in forward. Full fine-tuning in fp32 (ten chunks, the last one short; the
    # large-vocabulary case above, without its logits; tied embeddings), a bf16 base with LoRA,
    # QLoRA, and Gemma 2 with the logits' soft-cap inside the kernel. Without the logits the peak
    # moves into the layers: the bf16 cases peak in the final RMSNorm's backward (mul's and
    # pow's full-size temporaries) or in the last MLP's forward (the arguments its callers hold).
    ({"loss": "fused_linear_cross_entropy"}, 3, 50, "adamw", "fp32", (), None),
    ({"loss": "fused_linear_cross_entropy", "vocab_size": "8000", "num_key_value_heads": "1"}, 2,
     96, "adamw", "fp32", (), None),
    ({"loss": "fused_linear_cross_entropy", "tie_word_embeddings": "true", "use_cache": "false",
      "vocab_size": "4000"}, 2, 64, "sgd", "fp32", (), None),
    ({"loss": "fused_linear_cross_entropy", "vocab_size": "4000"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "alpha": 16}),
    ({"loss": "fused_linear_cross_entropy", "vocab_size": "4000"}, 2, 64, "adamw", "bf16", (),
     {"r": 8, "target": ("all-linear",), "quant": "nf4"}),
    ({"loss": "fused_linear_cross_entropy", "gemma": "true", "gemma2": "true",
      "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": "true",
      "final_logit_softcapping": "30", "sliding_window": "32", "vocab_size": "3000"}, 2, 64,
     "adamw", "bf16", (), {"r": 8}),
    # transformers 4.48's loss: the fp32 logits shifted by a contiguous copy (later releases pad
    # the labels), in fp32 and in bf16, the peak in the loss. And transformers 5's default load
    # (from_pretrained(dtype="auto"): the config's bf16) trained under autocast, in full and with
    # LoRA (peft's fp32 adapters, their input cast up and the product lowered again).
    ({"transformers": "4.48", "use_cache": "false"}, 2, 64, "adamw", "fp32", (), None),
    ({"transformers": "4.48", "vocab_size": "4000"}, 2, 64, "adamw", "bf16", (), None),
    ({"dtype": "bfloat16", "use_cache": "false"}, 2, 64, "adamw", "amp-bf16", (), None),
    ({"dtype": "bfloat16", "vocab_size": "32"}, 2, 64, "adamw", "amp-bf16", (),
     {"r": 8, "alpha": 16, "dropout": 0.1, "target": ("all-linear",)}),
]
# The keys that say how the model is loaded and trained, not what it is: given to trainfit as
# they are, and to the re-creation as what they do.
RELEASE_KEYS = ("transformers", "dtype")


def lora_flag(lora):
    """apply_lora's keywords as trainfit's --lora value."""
    items = [f"r={lora.get('r', 8)}", f"alpha={lora.get('alpha', 8)}",
             f"dropout={lora.get('dropout', 0.0)}",
             "target=" + ",".join(lora.get("target", ("q_proj", "v_proj")))]
    if not lora.get("fp32_adapters", True):
        items.append("adapter_dtype=base")
    if lora.get("quant"):
        items.append(f"quant={lora['quant']}")
        if not lora.get("double_quant", True):
            items.append("double_quant=false")
        if lora.get("prepare"):
            items.append("prepare=true")
    return ",".join(items)


def reference_sets(sets):
    """The fields trainfit is given: every one of the reference's, so no zoo default leaks in."""
    c = llama_reference.config(model_sets(sets))
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in c.items()}


def model_sets(sets):
    return {k: v for k, v in sets.items() if k not in RELEASE_KEYS}


def release_flags(sets, precision):
    """How the re-creation is loaded, for trainfit: in fp32 under autocast unless the case says."""
    release = {k: v for k, v in sets.items() if k in RELEASE_KEYS}
    if precision.startswith("amp") and "dtype" not in release:
        release["dtype"] = "float32"
    return set_flags(release)


def causal_lm_loss_448(logits, labels, vocab_size, ignore_index=-100):
    """transformers 4.48's ForCausalLMLoss: the logits upcast, then shifted by a copy."""
    logits = logits.float()
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    shift_logits = shift_logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    return torch.nn.functional.cross_entropy(shift_logits, shift_labels,
                                             ignore_index=ignore_index, reduction="mean")


class UnderAutocast(torch.nn.Module):
    """The model's forward, with the loss it computes, under torch.autocast("cpu", bfloat16): the
    Trainer's bf16=True. Backward runs outside it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.model(*args)


def reference_step(sets, batch, seq, optimizer, precision, frozen=(), lora=None, seed=0,
                   checkpoint=None):
    """Trains the re-creation two iterations: [its parameter count, the peak of live tensor
    bytes, where it peaked]. checkpoint: None, "reentrant" or "non-reentrant" on every layer."""
    torch.manual_seed(seed)
    c = llama_reference.config(model_sets(sets))
    model = llama_reference.LlamaForCausalLM(c)
    if precision == "bf16" or sets.get("dtype") == "bfloat16":
        model = model.to(torch.bfloat16)
    freeze(model, frozen)
    amp = precision == "amp-bf16"  # trained under CPU autocast, the model in fp32 unless dtype says
    if lora is not None:
        llama_reference.apply_lora(model, **lora,
                                   compute_dtype=torch.bfloat16 if amp and lora.get("quant")
                                   else None)
    if checkpoint is not None:
        llama_reference.gradient_checkpointing_enable(model, checkpoint == "reentrant")
    model.train()

    def make_batch():
        ids = torch.randint(0, c["vocab_size"], (batch, seq))
        return [ids, torch.randint(0, c["vocab_size"], (batch, seq))], []

    if amp:
        model = UnderAutocast(model)
    loss = llama_reference.causal_lm_loss
    if sets.get("transformers") == "4.48":
        llama_reference.causal_lm_loss = causal_lm_loss_448
    try:
        peak, where = training_peak(Case(model, [], [], lambda out: out.loss), optimizer,
                                    make_batch)
    finally:
        llama_reference.causal_lm_loss = loss
    # 4-bit weights count as the weights they pack, as peft counts them.
    weights = sum(p.numel() * getattr(p, "packing", 1) for p in model.parameters())
    return [weights, peak, where]


def liger_matches_transformers(sets):
    """The largest gap between the re-creation's Liger loss (its kernel done in numpy) and
    transformers' loss: in the loss and in every parameter's gradient, after one backward."""
    results = []
    for loss in ("cross_entropy", "fused_linear_cross_entropy"):
        torch.manual_seed(0)
        model = llama_reference.LlamaForCausalLM(llama_reference.config(dict(sets, loss=loss)))
        model.train()
        ids = torch.randint(0, model.config["vocab_size"], (3, 50))
        out = model(ids, torch.randint(0, model.config["vocab_size"], (3, 50)))
        out.loss.backward()
        results.append((out.loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    gap = (loss_a - loss_b).abs().item()
    return max([gap] + [(grads_a[n] - grads_b[n]).abs().max().item() for n in grads_a])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainfit", required=True, help="the trainfit binary")
    ap.add_argument("--remeasure", action="store_true", help="ignore the kept PyTorch figures")
    args = ap.parse_args()
    torch.set_num_threads(1)
    report = Report(f"decoder LMs (llama layout): trainfit estimate --device-profile cpu vs a "
                    f"re-creation of transformers' LlamaForCausalLM in PyTorch {torch.__version__} (CPU), "
                    f"within {TOLERANCE:.0%}")
    # The figures depend on the re-creation, so its file is the source the digest covers.
    measured = Measured("llm", llama_reference.__file__, args.remeasure)
    for case in CASES:
        sets, batch, seq, optimizer, precision, frozen, lora = case[:7]
        checkpoint = case[7] if len(case) > 7 else None
        fields = reference_sets(sets)

        def measure():
            return reference_step(sets, batch, seq, optimizer, precision, frozen, lora,
                                  checkpoint=checkpoint)

        key = [sets, batch, seq, optimizer, precision, list(frozen)]
        if lora is not None:
            key.append(lora_flag(lora))
        if checkpoint is not None:
            key.append(checkpoint)
        params, peak, where = measured.get(key, measure)
        gc.collect()
        flags = ["--seq-len", str(seq), "--batch", str(batch), "--optimizer", optimizer,
                 "--precision", precision, "--set", "attention=eager"] + set_flags(fields)
        flags += release_flags(sets, precision)
        for q in frozen:
            flags += ["--freeze", q]
        if lora is not None:
            flags += ["--lora", lora_flag(lora)]
        if checkpoint is not None:
            flags += ["--checkpoint", "model.layers.*"]
            if checkpoint == "reentrant":
                flags.append("--checkpoint-reentrant")
        ours = run_trainfit(args.trainfit, ["estimate", "--model", "llama", "--device-profile",
                                            "cpu", "--json"] + flags)
        label = f"b{batch} s{seq} {optimizer} {precision} {sets_label(sets)}"
        if frozen:
            label += " freeze " + ",".join(frozen)
        if lora is not None:
            label += " lora " + lora_flag(lora)
        if checkpoint is not None:
            label += " ckpt " + checkpoint
        report.check(ours["parameters"] == params,
                     f"{label:60s} parameters torch {params:,} trainfit {ours['parameters']:,}")
        predicted = ours["peak_allocated_bytes"]
        error = (predicted - peak) / peak
        report.check(abs(error) <= TOLERANCE,
                     f"{label:60s} peak torch {peak:>12,} ({where[0]} {where[1]}) trainfit "
                     f"{predicted:>12,} ({ours['peak_phase']} {ours['peak_iteration']}) "
                     f"{error:+.3%}")
    # The re-creation of Liger's loss is itself right: the same loss and gradients as
    # transformers' loss (fp32, untied, tied, and Gemma 2's soft-capped logits).
    for sets in ({}, {"tie_word_embeddings": "true"},
                 {"gemma": "true", "gemma2": "true", "final_logit_softcapping": "30",
                  "tie_word_embeddings": "true", "sliding_window": "32"}):
        gap = liger_matches_transformers(sets)
        report.check(gap <= 1e-6, f"Liger's loss and gradients against transformers' loss "
                                  f"{sets_label(sets) or '(defaults)':40s} largest gap {gap:.1e}")
    measured.save(report)
    report.finish()


if __name__ == "__main__":
    main()
