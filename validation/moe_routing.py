"""How far a mixture-of-experts peak moves with the router's spread: trainfit assumes the tokens
are spread evenly over the experts; this trains validation/llama_reference.py's Mixtral layout
with its natural router instead (random, untrained gates, which spread unevenly) and compares the
peak of live tensor bytes over two iterations with `trainfit estimate --device-profile cpu`.

Not a pass/fail check: it reports the difference for docs/language-models.md. Three seeds per configuration.

    /usr/bin/python3 validation/moe_routing.py --trainfit build/release/trainfit
"""
import argparse
import gc

import torch

import check_llm
import llama_reference
from harness import run_trainfit, set_flags, sets_label

# (config fields, batch, sequence length, optimizer): the peak in an expert's backward (a tiny
# vocabulary), then in the loss (a vocabulary larger than the model, as in real LLMs).
CASES = [
    ({"num_local_experts": "4", "vocab_size": "32", "intermediate_size": "512",
      "num_hidden_layers": "1"}, 2, 128, "sgd"),
    ({"num_local_experts": "8", "vocab_size": "32", "intermediate_size": "512",
      "num_hidden_layers": "2"}, 2, 128, "adamw"),
    ({"num_local_experts": "4", "vocab_size": "500"}, 2, 64, "adamw"),
]


def natural_spread(block, router_logits):
    """Leaves the router's logits as its gate made them."""
    del block, router_logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainfit", required=True, help="the trainfit binary")
    args = ap.parse_args()
    torch.set_num_threads(1)
    llama_reference.SparseMoeBlock.spread = natural_spread
    for sets, batch, seq, optimizer in CASES:
        flags = ["--seq-len", str(seq), "--batch", str(batch), "--optimizer", optimizer,
                 "--set", "attention=eager"] + set_flags(check_llm.reference_sets(sets))
        ours = run_trainfit(args.trainfit, ["estimate", "--model", "llama", "--device-profile",
                                            "cpu", "--json"] + flags)["peak_allocated_bytes"]
        for seed in range(3):
            _, peak, where = check_llm.reference_step(sets, batch, seq, optimizer, "fp32",
                                                      seed=seed)
            print(f"{sets_label(sets):70s} seed {seed}: torch {peak:>11,} "
                  f"({where[0]} {where[1]} {where[2]}) trainfit {ours:>11,} "
                  f"{(ours - peak) / peak:+.3%}")
            gc.collect()


if __name__ == "__main__":
    main()
