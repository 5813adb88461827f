"""Decoder language models: trainfit's `llama` zoo model (the LlamaForCausalLM layout that
--hf-config builds for Llama, Mistral and Qwen2) against a PyTorch re-creation of transformers
4.48's (validation/llama_reference.py) on CPU.

Each case is a small decoder given as config.json fields. The parameter count must be exact, and
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
from harness import (Measured, Report, freeze, parameter_counts, run_trainfit, set_flags,
                     sets_label, training_peak)
from torch_models import Case

TOLERANCE = 0.01

# (config.json fields on top of llama_reference.config's small decoder, batch, sequence length,
# optimizer, precision, --freeze prefixes)
CASES = [
    ({}, 2, 64, "adamw", "fp32", ()),
    ({"use_cache": "false", "tie_word_embeddings": "true"}, 3, 48, "sgd", "fp32", ()),
    # Qwen2's layout: biases on q, k and v; one key/value head per query head (no repeat).
    ({"qkv_bias": "true", "num_key_value_heads": "4"}, 2, 64, "adam", "fp32", ()),
    # A vocabulary larger than the model, as in every real LLM: the logits dominate.
    ({"vocab_size": "8000", "num_key_value_heads": "1"}, 2, 96, "adamw", "fp32", ()),
    # The whole model in bf16: the fp32 logits copy, RMSNorm's fp32 detour, the mask in bf16.
    ({"vocab_size": "4000"}, 2, 64, "adamw", "bf16", ()),
    # Frozen embedding and first layer: what autograd keeps through frozen linears.
    ({}, 2, 64, "adamw", "fp32", ("model.embed_tokens", "model.layers.0")),
]


def reference_sets(sets):
    """The fields trainfit is given: every one of the reference's, so no zoo default leaks in."""
    c = llama_reference.config(sets)
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in c.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainfit", required=True, help="the trainfit binary")
    ap.add_argument("--remeasure", action="store_true", help="ignore the kept PyTorch figures")
    args = ap.parse_args()
    torch.set_num_threads(1)
    report = Report(f"decoder LMs (llama layout): trainfit estimate --device-profile cpu vs a "
                    f"re-creation of transformers 4.48 in PyTorch {torch.__version__} (CPU), "
                    f"within {TOLERANCE:.0%}")
    # The figures depend on the re-creation, so its file is the source the digest covers.
    measured = Measured("llm", llama_reference.__file__, args.remeasure)
    for sets, batch, seq, optimizer, precision, frozen in CASES:
        fields = reference_sets(sets)

        def measure():
            torch.manual_seed(0)
            c = llama_reference.config(sets)
            model = llama_reference.LlamaForCausalLM(c)
            if precision == "bf16":
                model = model.to(torch.bfloat16)
            freeze(model, frozen)
            model.train()

            def make_batch():
                ids = torch.randint(0, c["vocab_size"], (batch, seq))
                return [ids, torch.randint(0, c["vocab_size"], (batch, seq))], []

            peak, where = training_peak(Case(model, [], [], lambda out: out.loss), optimizer,
                                        make_batch)
            return [parameter_counts(model)[0], peak, where]

        params, peak, where = measured.get([sets, batch, seq, optimizer, precision, list(frozen)],
                                           measure)
        gc.collect()
        flags = ["--seq-len", str(seq), "--batch", str(batch), "--optimizer", optimizer,
                 "--precision", precision, "--set", "attention=eager"] + set_flags(fields)
        for q in frozen:
            flags += ["--freeze", q]
        ours = run_trainfit(args.trainfit, ["estimate", "--model", "llama", "--device-profile",
                                            "cpu", "--json"] + flags)
        label = f"b{batch} s{seq} {optimizer} {precision} {sets_label(sets)}"
        if frozen:
            label += " freeze " + ",".join(frozen)
        report.check(ours["parameters"] == params,
                     f"{label:60s} parameters torch {params:,} trainfit {ours['parameters']:,}")
        predicted = ours["peak_allocated_bytes"]
        error = (predicted - peak) / peak
        report.check(abs(error) <= TOLERANCE,
                     f"{label:60s} peak torch {peak:>12,} ({where[0]} {where[1]}) trainfit "
                     f"{predicted:>12,} ({ours['peak_phase']} {ours['peak_iteration']}) "
                     f"{error:+.3%}")
    measured.save(report)
    report.finish()


if __name__ == "__main__":
    main()
