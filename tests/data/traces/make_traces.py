"""Writes the trace fixtures the command-line golden tests replay (tests/data/traces/).

    PYTHONPATH=python /usr/bin/python3 tests/data/traces/make_traces.py

A small convolutional net with dropout, traced by trainfit's own tracer at batch 1 and 2 under
Debian's PyTorch (CPU), with AdamW: small enough to commit, and it exercises what the cuda
profile maps (dropout's noise, the GEMM's cuBLAS workspace, the regenerated optimizer step).
"""
import os

import torch

import trainfit

HERE = os.path.dirname(os.path.abspath(__file__))


def tiny_cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Dropout(0.1),
        torch.nn.Linear(32, 10))


def main():
    trainfit.trace(tiny_cnn(),
                   lambda n: (torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))),
                   torch.nn.functional.cross_entropy, lambda p: torch.optim.AdamW(p),
                   out=os.path.join(HERE, "tiny_cnn.trace.json"), name="tiny_cnn")


if __name__ == "__main__":
    main()
