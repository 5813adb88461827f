"""LlamaForCausalLM as Hugging Face transformers 4.48 trains it on input_ids and labels (no padding
mask), eager attention, for the checks (transformers is not installed here).

Written from transformers' modeling_llama.py: module names and parameter shapes follow its
state_dict; the forward keeps its op order and its Python locals (a tensor bound to a local lives
until the function returns), builds the causal mask and the rotary tables as it does, keeps each
layer's key and value in a cache when use_cache, computes the loss inside the forward
(ForCausalLMLoss: logits upcast to fp32, labels padded and shifted) and returns the loss, the
logits and the cache together. Mistral and Qwen2 share the layout (Qwen2: biases on q, k, v), and
so does transformers 4.51's Qwen3ForCausalLM with qk_norm (an RMSNorm over each head of q and of
k, before the rotation; Qwen3Attention registers them after the projections), and so does
GemmaForCausalLM with gemma (embeddings times a CPU scalar tensor sqrt(hidden_size) after the
rotary tables are made, GemmaRMSNorm's (x * (1 + weight)) in fp32, a GELU gate), and so does
transformers' current Phi3ForCausalLM with phi3 (written from its modular_phi3.py: one qkv_proj
sliced into q, k and v, registered after o_proj; one gate_up_proj chunked into gate and up;
rotary over the first partial_rotary_factor of each head, the rest concatenated back; dropout
resid_pdrop on each residual branch), and so does MixtralForCausalLM with num_local_experts
(MixtralSparseMoeBlock in place of the MLP, looping over the experts that receive tokens). Its
router adds a fixed bias to its logits, in place, that sends token t to experts (t * k + j) mod
num_local_experts: the even spread trainfit assumes, where real routing depends on the data.
Gemma2ForCausalLM (gemma2, written from transformers' modeling_gemma2.py of early 2025: rotary
tables shared by the layers, last_cache_position) adds post_attention_layernorm on the attention's
output and pre_ and post_feedforward_layernorm around the MLP, soft-caps the attention scores and
the logits (cap * tanh(x / cap)), makes no cache in training, builds the causal mask over seq
keys, and windows it on even layers (tril of ones_like, then where).
Gemma3ForCausalLM (gemma3, written from transformers' current modeling_gemma3.py and
masking_utils.py, training with no padding mask and no cache) keeps Gemma 2's layer, adds an
RMSNorm over each head of q and of k after the transpose (q_norm, k_norm, registered after
o_proj), scales the embeddings inside the embedding module by an embed_scale buffer, windows every
layer but each sliding_window_pattern-th, makes its two rotary tables (one inv_freq buffer per
layer type) again for every layer before the first, the dict keeping the last of each type, and
builds one eager mask per layer type through masking_utils (find_packed_sequence_indices on the
position ids, sdpa_mask's broadcast comparisons, eager_mask's where); no soft-cap on the
attention scores.

With loss "fused_linear_cross_entropy" the training forward is Liger-Kernel 0.5.5's lce_forward:
no lm_head call and no logits, LigerForCausalLMLoss (labels padded and shifted, the hidden states
flattened) and LigerFusedLinearCrossEntropyFunction as its Python code runs, the Triton kernel
that turns a chunk of logits into their gradient in place done in numpy on the same memory (a
kernel allocates nothing, and neither does numpy through PyTorch).
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


def config(sets):
    """A small decoder's fields, with `sets` (config.json names, values as strings) on top."""
    c = dict(vocab_size=1000, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=0,
             max_position_embeddings=256, rms_norm_eps=1e-5, attention_bias=False,
             qkv_bias=False, mlp_bias=False, tie_word_embeddings=False, use_cache=True,
             attention_dropout=0.0, qk_norm=False, gemma=False, hidden_act="silu", phi3=False,
             partial_rotary_factor=1.0, resid_pdrop=0.0, num_local_experts=0,
             num_experts_per_tok=2, router_jitter_noise=0.0, gemma2=False,
             attn_logit_softcapping=0.0, final_logit_softcapping=0.0, sliding_window=0,
             loss="cross_entropy", gemma3=False, sliding_window_pattern=6)
    for k, v in (sets or {}).items():
        if k == "attention":
            assert v == "eager", "PyTorch 1.13 has no scaled_dot_product_attention"
            continue
        old = c[k]
        c[k] = (v == "true") if isinstance(old, bool) else type(old)(v)
    if not c["head_dim"]:
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    return c


class RMSNorm(nn.Module):
    def __init__(self, width, eps, gemma=False):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(width) if gemma else torch.ones(width))
        self.variance_epsilon = eps
        self.gemma = gemma

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)

    def forward(self, hidden_states):
        if self.gemma:
            # GemmaRMSNorm: (x * w).to(dtype) where Llama does x.to(dtype) * w.
            output = self._norm(hidden_states.float())
            output = output * (1.0 + self.weight.float())
            return output.type_as(hidden_states)
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, c):
        super().__init__()
        dim = int(c["head_dim"] * c["partial_rotary_factor"])
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()
        sin = emb.sin()
        cos = cos * self.attention_scaling
        sin = sin * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class Gemma3RotaryEmbedding(nn.Module):
    """One inv_freq buffer per layer type (both of the head's width; the bases do not matter
    here); cos is scaled before sin is made."""

    def __init__(self, c, layer_types):
        super().__init__()
        dim = c["head_dim"]
        for layer_type in sorted(set(layer_types)):
            inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
            self.register_buffer(f"{layer_type}_inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids, layer_type):
        inv_freq = getattr(self, f"{layer_type}_inv_freq")
        attention_scaling = 1.0
        inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * attention_scaling
        sin = emb.sin() * attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class Gemma3TextScaledWordEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim, embed_scale):
        super().__init__(num_embeddings, embedding_dim)
        self.register_buffer("embed_scale", torch.tensor(embed_scale), persistent=False)

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale.to(self.weight.dtype)


def find_packed_sequence_indices(position_ids):
    first_dummy_value = position_ids[:, :1] - 1
    position_diff = torch.diff(position_ids, prepend=first_dummy_value, dim=-1)
    packed_sequence_mask = (position_diff != 1).cumsum(-1)
    if (packed_sequence_mask[:, -1] == 0).all():
        return None
    return packed_sequence_mask


def causal_mask_function(batch_idx, head_idx, q_idx, kv_idx):
    return kv_idx <= q_idx


def sliding_window_causal_mask_function(sliding_window):
    def sliding_window_overlay(batch_idx, head_idx, q_idx, kv_idx):
        return kv_idx > q_idx - sliding_window

    def and_mask(batch_idx, head_idx, q_idx, kv_idx):
        result = q_idx.new_ones((), dtype=torch.bool)
        for mask in (sliding_window_overlay, causal_mask_function):
            result = result & mask(batch_idx, head_idx, q_idx, kv_idx).to(result.device)
        return result

    return and_mask


def eager_mask(batch_size, q_length, kv_length, mask_function, dtype):
    """masking_utils' eager_mask: sdpa_mask without the is_causal skip (no padding mask, torch
    >= 2.5, no vmap), then 0 where attended and the dtype's minimum elsewhere."""
    batch_arange = torch.arange(batch_size)
    head_arange = torch.arange(1)
    q_arange = torch.arange(q_length) + 0
    kv_arange = torch.arange(kv_length) + 0
    mask = mask_function(batch_arange[:, None, None, None], head_arange[None, :, None, None],
                         q_arange[None, None, :, None], kv_arange[None, None, None, :])
    mask = mask.expand(batch_size, -1, q_length, kv_length)
    min_dtype = torch.finfo(dtype).min
    mask = torch.where(mask, torch.tensor(0.0, dtype=dtype), min_dtype)
    return mask


def create_mask(inputs_embeds, position_ids, mask_function):
    """create_causal_mask or create_sliding_window_causal_mask, eager, in training."""
    batch_size = inputs_embeds.shape[0]
    if batch_size != position_ids.shape[0]:
        position_ids = position_ids.expand(batch_size, -1)
    packed_sequence_mask = find_packed_sequence_indices(position_ids)
    assert packed_sequence_mask is None
    q_length = inputs_embeds.shape[1]
    return eager_mask(batch_size, q_length, q_length, mask_function, inputs_embeds.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def apply_rotary_pos_emb_partial(q, k, cos, sin):
    """Phi-3's: only the first cos.shape[-1] dims of each head rotate; the rest pass through."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen,
                                                           head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0,
                            softcap=None):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if softcap is not None:
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class Cache:
    """DynamicCache as training fills it: each layer's key and value, appended."""

    def __init__(self):
        self.key_cache, self.value_cache = [], []

    def update(self, key_states, value_states, layer_idx):
        self.key_cache.append(key_states)
        self.value_cache.append(value_states)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]


class Attention(nn.Module):
    def __init__(self, c, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = c["head_dim"]
        self.num_key_value_groups = c["num_attention_heads"] // c["num_key_value_heads"]
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = c["attention_dropout"]
        self.softcap = c["attn_logit_softcapping"] or None
        qkv_bias = c["attention_bias"] or c["qkv_bias"]
        h, heads, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.phi3 = c["phi3"]
        if self.phi3:
            self.num_heads, self.num_key_value_heads = heads, kv
            self.o_proj = nn.Linear(heads * self.head_dim, h, bias=False)
            self.qkv_proj = nn.Linear(h, (heads + 2 * kv) * self.head_dim, bias=False)
            self.qk_norm = False
            return
        self.q_proj = nn.Linear(h, heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(h, kv * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(h, kv * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(heads * self.head_dim, h, bias=c["attention_bias"])
        self.qk_norm = c["qk_norm"]
        self.gemma3 = c["gemma3"]
        if self.qk_norm or self.gemma3:
            self.q_norm = RMSNorm(self.head_dim, c["rms_norm_eps"], self.gemma3)
            self.k_norm = RMSNorm(self.head_dim, c["rms_norm_eps"], self.gemma3)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_value):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        if self.phi3:
            qkv = self.qkv_proj(hidden_states)
            query_pos = self.num_heads * self.head_dim
            query_states = qkv[..., :query_pos]
            key_states = qkv[..., query_pos: query_pos + self.num_key_value_heads * self.head_dim]
            value_states = qkv[..., query_pos + self.num_key_value_heads * self.head_dim:]
            query_states = query_states.view(hidden_shape).transpose(1, 2)
            key_states = key_states.view(hidden_shape).transpose(1, 2)
            value_states = value_states.view(hidden_shape).transpose(1, 2)
            cos, sin = position_embeddings
            query_states, key_states = apply_rotary_pos_emb_partial(query_states, key_states, cos,
                                                                    sin)
            return self._attend(query_states, key_states, value_states, input_shape,
                                attention_mask, past_key_value)
        if self.gemma3:
            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            query_states = self.q_norm(query_states)
            key_states = self.k_norm(key_states)
            cos, sin = position_embeddings
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
            return self._attend(query_states, key_states, value_states, input_shape,
                                attention_mask, past_key_value)
        if self.qk_norm:
            query_states = self.q_norm(
                self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
            key_states = self.k_norm(
                self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        else:
            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return self._attend(query_states, key_states, value_states, input_shape, attention_mask,
                            past_key_value)

    def _attend(self, query_states, key_states, value_states, input_shape, attention_mask,
                past_key_value):
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states,
                                                             self.layer_idx)
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
            softcap=self.softcap)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i, bias = c["hidden_size"], c["intermediate_size"], c["mlp_bias"]
        act = c["hidden_act"]
        self.phi3 = c["phi3"]
        if self.phi3:
            self.gate_up_proj = nn.Linear(h, 2 * i, bias=False)
            self.down_proj = nn.Linear(i, h, bias=False)
            self.activation_fn = nn.SiLU() if act == "silu" else nn.GELU(
                approximate="tanh" if act == "gelu_pytorch_tanh" else "none")
            return
        self.gate_proj = nn.Linear(h, i, bias=bias)
        self.up_proj = nn.Linear(h, i, bias=bias)
        self.down_proj = nn.Linear(i, h, bias=bias)
        act = c["hidden_act"]
        self.act_fn = nn.SiLU() if act == "silu" else nn.GELU(
            approximate="tanh" if act == "gelu_pytorch_tanh" else "none")

    def forward(self, x):
        if self.phi3:
            up_states = self.gate_up_proj(x)
            gate, up_states = up_states.chunk(2, dim=-1)
            up_states = up_states * self.activation_fn(gate)
            return self.down_proj(up_states)
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class BlockSparseTop2MLP(nn.Module):
    """MixtralBlockSparseTop2MLP: one expert."""

    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.w1 = nn.Linear(h, i, bias=False)
        self.w2 = nn.Linear(i, h, bias=False)
        self.w3 = nn.Linear(h, i, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        current_hidden_states = self.w2(current_hidden_states)
        return current_hidden_states


class SparseMoeBlock(nn.Module):
    """MixtralSparseMoeBlock, with the router's spread fixed (see the module's docstring)."""

    def __init__(self, c):
        super().__init__()
        self.hidden_dim = c["hidden_size"]
        self.num_experts = c["num_local_experts"]
        self.top_k = c["num_experts_per_tok"]
        self.gate = nn.Linear(self.hidden_dim, self.num_experts, bias=False)
        self.experts = nn.ModuleList([BlockSparseTop2MLP(c) for _ in range(self.num_experts)])
        self.jitter_noise = c["router_jitter_noise"]

    def spread(self, router_logits):
        """Token t to experts (t * k + j) mod E, j < k: added in place, a transient bias."""
        tokens = router_logits.shape[0]
        slots = torch.arange(tokens * self.top_k).view(tokens, self.top_k) % self.num_experts
        bias = torch.zeros(tokens, self.num_experts, dtype=router_logits.dtype)
        bias.scatter_(1, slots, 1e4)
        router_logits += bias

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        if self.training and self.jitter_noise > 0:
            hidden_states *= torch.empty_like(hidden_states).uniform_(
                1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        self.spread(router_logits)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim),
                                          dtype=hidden_states.dtype)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class DecoderLayer(nn.Module):
    def __init__(self, c, layer_idx):
        super().__init__()
        self.self_attn = Attention(c, layer_idx)
        self.moe = c["num_local_experts"] > 0
        if self.moe:
            self.block_sparse_moe = SparseMoeBlock(c)
        else:
            self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], c["gemma"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], c["gemma"])
        self.gemma2 = c["gemma2"]
        self.gemma3 = c["gemma3"]
        if self.gemma2 or self.gemma3:
            self.pre_feedforward_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], True)
            self.post_feedforward_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], True)
            self.is_sliding = self.gemma2 and not bool(layer_idx % 2)
            self.sliding_window = c["sliding_window"]
        if self.gemma3:
            pattern = c["sliding_window_pattern"]
            self.attention_type = ("sliding_attention" if pattern == 0 or (layer_idx + 1) % pattern
                                   else "full_attention")
        self.phi3 = c["phi3"]
        if self.phi3:
            self.resid_attn_dropout = nn.Dropout(c["resid_pdrop"])
            self.resid_mlp_dropout = nn.Dropout(c["resid_pdrop"])

    def forward(self, hidden_states, attention_mask, past_key_value, position_embeddings,
                cache_position=None):
        if self.gemma2 or self.gemma3:
            return self._gemma2_forward(hidden_states, attention_mask, position_embeddings,
                                        cache_position)
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, self_attn_weights = self.self_attn(
            hidden_states, position_embeddings, attention_mask, past_key_value)
        if self.phi3:
            hidden_states = self.resid_attn_dropout(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        if self.moe:
            hidden_states, router_logits = self.block_sparse_moe(hidden_states)
        else:
            hidden_states = self.mlp(hidden_states)
        if self.phi3:
            hidden_states = self.resid_mlp_dropout(hidden_states)
        hidden_states = residual + hidden_states
        return (hidden_states,)

    def _gemma2_forward(self, hidden_states, attention_mask, position_embeddings, cache_position):
        """Gemma2DecoderLayer.forward, training with no padding (last_cache_position 0)."""
        if self.is_sliding and attention_mask is not None:
            effective_seq_len = max(cache_position.shape[0], self.sliding_window)
            min_dtype = torch.finfo(attention_mask.dtype).min
            sliding_window_mask = torch.tril(
                torch.ones_like(attention_mask, dtype=torch.bool), diagonal=-self.sliding_window)
            attention_mask = torch.where(sliding_window_mask, min_dtype, attention_mask)
            offset = max(0, 0 - effective_seq_len)
            attention_mask = attention_mask[:, :, :, offset: offset + effective_seq_len]
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, self_attn_weights = self.self_attn(
            hidden_states, position_embeddings, attention_mask, None)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return (hidden_states,)


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        if c["gemma3"]:
            self.embed_tokens = Gemma3TextScaledWordEmbedding(c["vocab_size"], c["hidden_size"],
                                                              c["hidden_size"]**0.5)
        else:
            self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c, i) for i in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], c["gemma"])
        if c["gemma3"]:
            self.layer_types = [layer.attention_type for layer in self.layers]
            self.rotary_emb = Gemma3RotaryEmbedding(c, self.layer_types)
        else:
            self.rotary_emb = RotaryEmbedding(c)
        # gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ...}):
        # None, "reentrant" or "non-reentrant".
        self.gradient_checkpointing = None

    def forward(self, input_ids):
        if self.config["gemma3"]:
            return self._gemma3_forward(input_ids)
        inputs_embeds = self.embed_tokens(input_ids)
        # Gemma2Model makes its HybridCache only outside training, and no decoder keeps one
        # under gradient checkpointing.
        use_cache = self.config["use_cache"] and not self.config["gemma2"] and not (
            self.gradient_checkpointing and self.training)
        past_key_values = Cache() if use_cache else None
        cache_position = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device)
        position_ids = cache_position.unsqueeze(0)
        causal_mask = self._update_causal_mask(inputs_embeds, cache_position)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        if self.config["gemma"]:
            # GemmaModel: a CPU scalar tensor in the embeddings' dtype.
            normalizer = torch.tensor(self.config["hidden_size"]**0.5, dtype=hidden_states.dtype)
            hidden_states = hidden_states * normalizer
        for decoder_layer in self.layers:
            if self.gradient_checkpointing and self.training:
                # transformers passes the layer's arguments through torch.utils.checkpoint, which
                # keeps the tensors among them (cache_position too) until the layer's backward.
                layer_outputs = torch.utils.checkpoint.checkpoint(
                    decoder_layer.__call__, hidden_states, causal_mask, past_key_values,
                    position_embeddings, cache_position,
                    use_reentrant=self.gradient_checkpointing == "reentrant")
            else:
                layer_outputs = decoder_layer(hidden_states, causal_mask, past_key_values,
                                              position_embeddings, cache_position)
            hidden_states = layer_outputs[0]
        hidden_states = self.norm(hidden_states)
        return hidden_states, past_key_values

    def _gemma3_forward(self, input_ids):
        """Gemma3TextModel.forward in training: no cache, no padding mask."""
        inputs_embeds = self.embed_tokens(input_ids)
        cache_position = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device)
        position_ids = cache_position.unsqueeze(0)
        causal_mask_mapping = {
            "full_attention": create_mask(inputs_embeds, position_ids, causal_mask_function),
            "sliding_attention": create_mask(
                inputs_embeds, position_ids,
                sliding_window_causal_mask_function(self.config["sliding_window"])),
        }
        hidden_states = inputs_embeds
        position_embeddings = {}
        for layer_type in self.layer_types:
            position_embeddings[layer_type] = self.rotary_emb(hidden_states, position_ids,
                                                              layer_type)
        for decoder_layer in self.layers:
            mask = causal_mask_mapping[decoder_layer.attention_type]
            tables = position_embeddings[decoder_layer.attention_type]
            if self.gradient_checkpointing and self.training:
                layer_outputs = torch.utils.checkpoint.checkpoint(
                    decoder_layer.__call__, hidden_states, mask, None, tables, cache_position,
                    use_reentrant=self.gradient_checkpointing == "reentrant")
            else:
                layer_outputs = decoder_layer(hidden_states, mask, None, tables, cache_position)
            hidden_states = layer_outputs[0]
        hidden_states = self.norm(hidden_states)
        return hidden_states, None

    def _update_causal_mask(self, input_tensor, cache_position):
        """The eager path with no attention_mask: _prepare_4d_causal_attention_mask_with_cache_position
        with target_length = seq + 1 (Gemma2Model's: seq)."""
        dtype = input_tensor.dtype
        min_dtype = torch.finfo(dtype).min
        sequence_length = input_tensor.shape[1]
        target_length = sequence_length + (0 if self.config["gemma2"] else 1)
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype,
                                 dtype=dtype)
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
        return causal_mask


def causal_lm_loss(logits, labels, vocab_size, ignore_index=-100):
    """transformers' ForCausalLMLoss."""
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    return F.cross_entropy(logits, shift_labels, ignore_index=ignore_index, reduction="mean")


def _cross_entropy_kernel(logits, target, loss, n_non_ignore, softcap, ignore_index=-100):
    """liger_cross_entropy_kernel (reduction mean): each row's loss into `loss`, and the row
    replaced by its gradient, softmax minus the one-hot target over the counted tokens (times
    the soft-cap's derivative), in place. Done in numpy on the tensors' own memory."""
    if logits.dtype == torch.bfloat16:
        bits = logits.view(torch.int16).numpy()
        x = (bits.astype(np.int32) << 16).view(np.float32).astype(np.float64)
    else:
        x = logits.numpy().astype(np.float64)
    t = target.numpy()
    raw = x
    if softcap:
        x = softcap * np.tanh(raw / softcap)
    m = x.max(axis=1, keepdims=True)
    p = np.exp(x - m)
    total = p.sum(axis=1, keepdims=True)
    p /= total
    rows = np.arange(x.shape[0])
    counted = t != ignore_index
    picked = np.where(counted, t, 0)
    row_loss = (np.log(total[:, 0]) + m[:, 0] - x[rows, picked]) / n_non_ignore
    p[rows, picked] -= counted
    p /= n_non_ignore
    if softcap:
        p *= 1 - np.tanh(raw / softcap) ** 2
    p[~counted] = 0
    loss.numpy()[:] = np.where(counted, row_loss, 0)
    if logits.dtype == torch.bfloat16:
        bits[:] = (p.astype(np.float32).view(np.int32) >> 16).astype(np.int16)
    else:
        logits.numpy()[:] = p


def _fused_linear_cross_entropy_forward(_input, weight, target, softcap, ignore_index=-100):
    """Liger 0.5's fused_linear_cross_entropy_forward (no bias, no class weights, no z-loss,
    reduction mean)."""
    BT, H = _input.shape
    V = weight.shape[0]
    inc_factor = -(-V // H)
    chunk_size = 1 << (-(-BT // inc_factor) - 1).bit_length()
    num_chunks = -(-BT // chunk_size)
    grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
    grad_input = torch.zeros_like(_input)
    loss_1d = torch.zeros(BT, dtype=torch.float32)
    target_mask = target != ignore_index
    total_n_non_ignore = target_mask.sum().item()
    for chunk_id in range(num_chunks):
        start_idx = chunk_id * chunk_size
        end_idx = min((chunk_id + 1) * chunk_size, BT)
        _input_chunk = _input[start_idx:end_idx]
        logits_chunk = _input_chunk @ weight.t()
        target_chunk = target[start_idx:end_idx]
        loss_1d_slice = loss_1d[start_idx:end_idx]
        logits_chunk = logits_chunk.contiguous()
        target_chunk = target_chunk.contiguous()
        _cross_entropy_kernel(logits_chunk.detach(), target_chunk, loss_1d_slice,
                              total_n_non_ignore, softcap)
        loss_1d[start_idx:end_idx] = loss_1d_slice
        grad_logits_chunk = logits_chunk
        grad_input[start_idx:end_idx] = grad_logits_chunk @ weight
        if grad_weight is not None:
            torch.addmm(input=grad_weight, mat1=logits_chunk.t().to(_input_chunk.dtype),
                        mat2=_input_chunk, out=grad_weight, alpha=1.0, beta=1.0)
    loss = torch.sum(loss_1d)
    return loss, grad_input, grad_weight


class LigerFusedLinearCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, _input, weight, target, softcap):
        loss, grad_input, grad_weight = _fused_linear_cross_entropy_forward(
            _input, weight, target, softcap)
        ctx.save_for_backward(grad_input.detach(),
                              grad_weight.detach() if grad_weight is not None else None)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors
        # fused_linear_cross_entropy_backward: element_mul_kernel scales in place.
        if not torch.equal(grad_output, torch.tensor(1.0, device=grad_output.device)):
            grad_input.mul_(grad_output)
            if grad_weight is not None:
                grad_weight.mul_(grad_output)
        return grad_input, grad_weight, None, None


def liger_causal_lm_loss(hidden_states, lm_head_weight, labels, hidden_size, softcap,
                         ignore_index=-100):
    """Liger's LigerForCausalLMLoss and fixed_fused_linear_cross_entropy, reduction mean."""
    labels = F.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    hidden_states = hidden_states.view(-1, hidden_size)
    shift_labels = shift_labels.view(-1)
    return LigerFusedLinearCrossEntropyFunction.apply(hidden_states, lm_head_weight,
                                                      shift_labels, softcap)


class Output:
    """CausalLMOutputWithPast: the loss, the logits and the cache, held together by the loop."""

    def __init__(self, loss, logits, past_key_values):
        self.loss, self.logits, self.past_key_values = loss, logits, past_key_values


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, labels):
        hidden_states, past_key_values = self.model(input_ids)
        cap = self.config["final_logit_softcapping"]
        if self.config["loss"] == "fused_linear_cross_entropy" and self.training:
            # Liger's lce_forward: in training the logits are never made.
            loss = liger_causal_lm_loss(hidden_states, self.lm_head.weight, labels,
                                        self.config["hidden_size"], cap or None)
            return Output(loss, None, past_key_values)
        logits = self.lm_head(hidden_states[:, -0:, :])
        if cap:
            logits = logits / cap
            logits = torch.tanh(logits)
            logits = logits * cap
        loss = causal_lm_loss(logits, labels, self.config["vocab_size"])
        return Output(loss, logits, past_key_values)


class LoraLinear(nn.Module):
    """peft's lora.Linear with one adapter, "default", as get_peft_model makes it: the adapters
    are made in the base layer's dtype, then cast to fp32 when that is bf16 or fp16
    (autocast_adapter_dtype=True) unless `fp32_adapters` is False. Over a 4-bit base, whose
    weight is not a float, they stay in torch's default dtype, fp32
    (_move_adapter_to_device_of_base_layer)."""

    def __init__(self, base_layer, r, alpha, dropout, fp32_adapters):
        super().__init__()
        self.base_layer = base_layer
        self.lora_dropout = nn.ModuleDict(
            {"default": nn.Dropout(p=dropout) if dropout > 0 else nn.Identity()})
        self.lora_A = nn.ModuleDict({"default": nn.Linear(base_layer.in_features, r, bias=False)})
        self.lora_B = nn.ModuleDict({"default": nn.Linear(r, base_layer.out_features, bias=False)})
        self.scaling = {"default": alpha / r}
        dtype = base_layer.weight.dtype
        if not dtype.is_floating_point:
            dtype = torch.float32
        if fp32_adapters and dtype in (torch.bfloat16, torch.float16):
            dtype = torch.float32
        self.lora_A.to(dtype)
        self.lora_B.to(dtype)

    def forward(self, x):
        result = self.base_layer(x)
        torch_result_dtype = result.dtype
        lora_A = self.lora_A["default"]
        lora_B = self.lora_B["default"]
        dropout = self.lora_dropout["default"]
        scaling = self.scaling["default"]
        if x.dtype != lora_A.weight.dtype:
            x = x.to(lora_A.weight.dtype)
        result = result + lora_B(lora_A(dropout(x))) * scaling
        result = result.to(torch_result_dtype)
        return result


class MatMul4Bit(torch.autograd.Function):
    """bitsandbytes' MatMul4Bit (autograd/_functions.py): the weight dequantized for the product,
    neither it nor the input kept; backward dequantizes it again for the input's gradient."""

    @staticmethod
    def forward(ctx, A, layer):
        output = F.linear(A, layer.dequantize(), layer.bias)
        ctx.layer = layer
        return output

    @staticmethod
    def backward(ctx, grad_output):
        return torch.matmul(grad_output, ctx.layer.dequantize()), None


class Linear4bit(nn.Module):
    """bitsandbytes' Linear4bit after Params4bit quantized `linear`'s weight on the GPU: two 4-bit
    codes per uint8 byte, shape ((n + 1) // 2, 1) for n weights, and the QuantState's tensors
    beside it: one absmax per 64 weights (fp32; with double quantization uint8 codes, one fp32
    absmax per 256 of them, the 256-entry dynamic map and the fp32 offset) and the 16-entry code
    book. It computes in the dtype the weight was loaded in (bnb_4bit_compute_dtype = that dtype),
    or in `compute_dtype` when given (bfloat16 for a model loaded in fp32 and trained under
    autocast).

    dequantize() makes what functional.dequantize_4bit makes: the nested absmax in fp32 first,
    then the weight in its dtype, each one new tensor written by a CUDA kernel. The values written
    here are random: the re-creation reproduces the tensors a step makes, not the 4-bit arithmetic.
    """

    def __init__(self, linear, double_quant, compute_dtype=None):
        super().__init__()
        self.out_features, self.in_features = linear.weight.shape
        self.dtype = compute_dtype or linear.weight.dtype
        n = linear.weight.numel()
        blocks = -(-n // 64)
        self.weight = nn.Parameter(torch.zeros((n + 1) // 2, 1, dtype=torch.uint8),
                                   requires_grad=False)
        self.weight.packing = 2
        self.double_quant = double_quant
        if double_quant:
            self.register_buffer("absmax", torch.zeros(blocks, dtype=torch.uint8))
            self.register_buffer("nested_absmax", torch.ones(-(-blocks // 256)))
            self.register_buffer("nested_quant_map", torch.linspace(-1, 1, 256))
            self.register_buffer("offset", torch.tensor(0.0))
        else:
            self.register_buffer("absmax", torch.ones(blocks))
        self.register_buffer("quant_map", torch.linspace(-1, 1, 16))
        self.bias = linear.bias

    def dequantize(self):
        absmax = self.absmax
        if self.double_quant:
            absmax = torch.empty(self.absmax.shape, dtype=torch.float32).uniform_()
            absmax += self.offset
        weight = torch.empty(self.out_features, self.in_features, dtype=self.dtype)
        weight.uniform_(-0.02, 0.02)
        del absmax
        return weight

    def forward(self, x):
        # bitsandbytes computes in the compute dtype and hands back the input's dtype (both the
        # same unless prepare_model_for_kbit_training made the hidden states fp32).
        inp_dtype = x.dtype
        x = x.to(self.dtype)
        return MatMul4Bit.apply(x, self).to(inp_dtype)


class LoraLinear4bit(LoraLinear):
    """peft's lora.Linear4bit (tuners/lora/bnb.py): the base's result cloned; the adapters'
    output cast to its dtype, then added. Under autocast (requires_conversion = not
    torch.is_autocast_enabled(), which on a GPU is CUDA's autocast, here the CPU's) neither the
    input nor the output is cast: autocast lowers the adapters' products and the add promotes."""

    def forward(self, x):
        result = self.base_layer(x).clone()
        lora_A = self.lora_A["default"]
        lora_B = self.lora_B["default"]
        requires_conversion = not (torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled())
        expected_dtype = result.dtype
        if requires_conversion and x.dtype != lora_A.weight.dtype:
            x = x.to(lora_A.weight.dtype)
        output = lora_B(lora_A(self.lora_dropout["default"](x))) * self.scaling["default"]
        if requires_conversion:
            output = output.to(expected_dtype)
        result = result + output
        return result


def gradient_checkpointing_enable(model, reentrant):
    """transformers' gradient_checkpointing_enable on every decoder layer, with use_reentrant as
    asked; under reentrant checkpointing, enable_input_require_grads as peft (or transformers, with
    an adapter) calls it: a forward hook makes the embeddings' output require grad."""
    model.model.gradient_checkpointing = "reentrant" if reentrant else "non-reentrant"
    if reentrant:
        model.model.embed_tokens.register_forward_hook(
            lambda module, args, output: output.requires_grad_(True))


def prepare_model_for_kbit_training(model):
    """peft's, with use_gradient_checkpointing=False: every parameter frozen, and every bf16 or
    fp16 one (the 4-bit weights are uint8) cast to fp32."""
    for param in model.parameters():
        param.requires_grad = False
    for param in model.parameters():
        if param.dtype in (torch.float16, torch.bfloat16):
            param.data = param.data.to(torch.float32)


def apply_lora(model, r=8, alpha=8, dropout=0.0, target=("q_proj", "v_proj"),
               fp32_adapters=True, quant=None, double_quant=True, prepare=False, compute_dtype=None):
    """get_peft_model(model, LoraConfig(...)): each nn.Linear whose name is a target, or ends in
    ".target" ("all-linear": every Linear but lm_head), becomes a LoraLinear; then only
    parameters named lora_* train. quant ("nf4", "fp4": the same bytes) first makes every Linear
    but lm_head a Linear4bit, as from_pretrained(quantization_config=BitsAndBytesConfig(
    load_in_4bit=True, ...)) does, and the targets peft's LoraLinear4bit; with prepare,
    prepare_model_for_kbit_training runs on the 4-bit model before the adapters are added.
    compute_dtype: bnb_4bit_compute_dtype, when not the model's dtype."""
    if quant is not None:
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.Linear) and name != "lm_head":
                parent_name, _, child = name.rpartition(".")
                setattr(model.get_submodule(parent_name), child, Linear4bit(module, double_quant,
                                                                           compute_dtype))
        if prepare:
            prepare_model_for_kbit_training(model)
    kind = nn.Linear if quant is None else Linear4bit
    for name, module in list(model.named_modules()):
        if not isinstance(module, kind) or name == "lm_head":
            continue
        if not any(t == "all-linear" or name == t or name.endswith("." + t) for t in target):
            continue
        parent_name, _, child = name.rpartition(".")
        lora = (LoraLinear if quant is None else LoraLinear4bit)(module, r, alpha, dropout,
                                                                fp32_adapters)
        setattr(model.get_submodule(parent_name), child, lora)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model
