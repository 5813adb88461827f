"""Measures the three-Linear MLP that src/lower/fsdp_test.cc replays under FSDP.

x (8, 1000) -> Linear 1000 -> ReLU -> Linear 1000 -> ReLU -> Linear 10 -> sum, each Linear its
own unit, FULL_SHARD, SGD, two ranks on gloo with check_fsdp.py's CPU stand-ins for FSDP's
streams and collectives, trained as check_fsdp.py trains (two iterations, the batch and the
output held through each). Prints rank 0's peak of live tensor bytes and the peak of each
phase, in fp32 and under MixedPrecision in bf16: the figures the unit tests assert.

    /usr/bin/python3 validation/fsdp_mlp.py
"""
import sys

import torch

from check_ddp import spawn_ranks
from check_fsdp import finish_rank, fsdp_training, join_gloo


def rank_main(rank, port, mixed, out):
    join_gloo(rank, port)
    model = torch.nn.Sequential(torch.nn.Linear(1000, 1000), torch.nn.ReLU(),
                                torch.nn.Linear(1000, 1000), torch.nn.ReLU(),
                                torch.nn.Linear(1000, 10))
    mode = fsdp_training(model, {model[0], model[2], model[4]}, "sgd",
                         lambda: ([torch.randn(8, 1000)], []), lambda out: out.sum(),
                         mixed=mixed)
    finish_rank(rank, out, {"peak": mode.peak, "where": list(mode.peak_at),
                            "phases": mode.phase_peak})


def main():
    for mixed in (False, True):
        ranks = spawn_ranks(rank_main, mixed)
        if ranks is None:
            print("the ranks did not finish", file=sys.stderr)
            return 1
        r = ranks[0]
        print(f"{'bf16 mixed precision' if mixed else 'fp32'}: peak {r['peak']:,} "
              f"({r['where'][0]} {r['where'][1]}); by phase "
              + ", ".join(f"{k} {v:,}" for k, v in r["phases"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
