"""Writes the trace fixtures the command-line golden tests replay (tests/data/traces/).

    PYTHONPATH=python /usr/bin/python3 tests/data/traces/make_traces.py [tiny_cnn] [tiny_block_amp]

A small convolutional net with dropout, traced by trainfit's own tracer at batch 1 and 2 under
Debian's PyTorch (CPU), with AdamW: small enough to commit, and it exercises what the cuda
profile maps (dropout's noise, the GEMM's cuBLAS workspace, the regenerated optimizer step).
A small Transformer block traced at batch 2 and 3 under CUDA's autocast lists
(trainfit.autocast): convolution and matmuls in bf16, LayerNorm, softmax and the loss in fp32,
for the goldens of `--precision amp-bf16` and `amp-fp16` on a trace.
"""
import os
import sys

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


class TinyBlock(torch.nn.Module):
    """Patches, one pre-norm attention block with its MLP, and a classifier."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.patch = torch.nn.Conv2d(3, dim, 8, stride=8)
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, 10)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        n, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(n, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((weights @ v).transpose(1, 2).reshape(n, t, d))
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(1))


def write_tiny_cnn():
    trainfit.trace(tiny_cnn(),
                   lambda n: (torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))),
                   torch.nn.functional.cross_entropy, lambda p: torch.optim.AdamW(p),
                   batch_sizes=(1, 2), out=os.path.join(HERE, "tiny_cnn.trace.json"),
                   name="tiny_cnn")


def write_tiny_block_amp():
    torch.manual_seed(0)
    trainfit.trace(TinyBlock(),
                   lambda n: (torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))),
                   torch.nn.functional.cross_entropy, lambda p: torch.optim.AdamW(p),
                   batch_sizes=(2, 3), out=os.path.join(HERE, "tiny_block_amp.trace.json"),
                   name="tiny_block", autocast="cuda")


FIXTURES = {"tiny_cnn": write_tiny_cnn, "tiny_block_amp": write_tiny_block_amp}


def main(names):
    """Writes the fixtures named (all by default)."""
    for name in names or FIXTURES:
        FIXTURES[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
