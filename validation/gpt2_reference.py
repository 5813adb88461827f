"""GPT-2 as Hugging Face transformers 4.46-4.48 runs GPT2LMHeadModel in training, eager attention.

Written from the published architecture for the checks (transformers is not installed here):
module names and parameter shapes follow its state_dict, the forward follows its op order
(Conv1D = addmm with an (in, out) weight, a bool causal-mask buffer, the "gelu_new" formula in
Python ops, lm_head tied to wte, labels padded and shifted for the loss).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": dict(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": dict(n_layer=36, n_head=20, n_embd=1280),
}


def config(name, sets):
    c = dict(SIZES[name], vocab_size=50257, n_positions=1024, dropout=0.1, activation="gelu_new")
    for k, v in (sets or {}).items():
        if k in ("attention",):
            assert v == "eager", "the reference implements eager attention"
            continue
        c[k] = type(c[k])(v) if not isinstance(c[k], float) else float(v)
    return c


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        n = c["n_positions"]
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.embed, self.heads = c["n_embd"], c["n_head"]
        self.head_dim = self.embed // self.heads
        self.c_attn = Conv1D(3 * self.embed, self.embed)
        self.c_proj = Conv1D(self.embed, self.embed)
        self.attn_dropout = nn.Dropout(c["dropout"])
        self.resid_dropout = nn.Dropout(c["dropout"])

    def _split(self, t):
        return t.view(t.size()[:-1] + (self.heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.embed, dim=2)
        q, k, v = self._split(q), self._split(k), self._split(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        lq, lk = q.size(-2), k.size(-2)
        causal = self.bias[:, :, lk - lq:lk, :lk]
        lowest = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        w = torch.where(causal, w.to(w.dtype), lowest)
        w = F.softmax(w, dim=-1)
        w = w.type(v.dtype)
        w = self.attn_dropout(w)
        out = torch.matmul(w, v)
        out = out.permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.embed,))
        return self.resid_dropout(self.c_proj(out))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = Conv1D(4 * c["n_embd"], c["n_embd"])
        self.c_proj = Conv1D(c["n_embd"], 4 * c["n_embd"])
        self.act = NewGELU() if c["activation"] == "gelu_new" else nn.GELU(approximate="tanh")
        self.dropout = nn.Dropout(c["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"], eps=1e-5)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"], eps=1e-5)
        self.mlp = MLP(c)

    def forward(self, h):
        h = self.attn(self.ln_1(h)) + h
        return h + self.mlp(self.ln_2(h))


class GPT2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.drop = nn.Dropout(c["dropout"])
        self.h = nn.ModuleList([Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=1e-5)

    def forward(self, ids):
        positions = torch.arange(0, ids.shape[1], dtype=torch.long).unsqueeze(0)
        h = self.drop(self.wte(ids) + self.wpe(positions))
        for block in self.h:
            h = block(h)
        return self.ln_f(h)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids):
        return self.lm_head(self.transformer(ids))


def causal_lm_loss(logits, labels, vocab_size, ignore_index=-100):
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=ignore_index)
    shift = labels[..., 1:].contiguous()
    return F.cross_entropy(logits.view(-1, vocab_size), shift.view(-1), ignore_index=ignore_index)
