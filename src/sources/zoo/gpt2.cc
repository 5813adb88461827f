// GPT-2 (gpt2, gpt2-medium, gpt2-large) as Hugging Face transformers 4.46-4.48 runs
// GPT2LMHeadModel in training: learned token and position embeddings, pre-norm blocks with
// Conv1D projections, eager or SDPA causal attention, the "gelu_new" tanh formula written out
// in Python ops, a final LayerNorm, an lm_head tied to the token embedding, and the causal LM
// loss (labels padded and shifted, logits upcast to fp32).
//
// attention=sdpa (transformers' default) needs PyTorch >= 2.1.1; on PyTorch 1.13 transformers
// falls back to eager attention, and so does this model under the cpu profile.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "sources/zoo/causal_lm.h"
#include "sources/zoo/nn.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

struct Gpt2Shape {
  const char* name;
  int64_t layers, heads, embed;
  const char* params;
};

constexpr Gpt2Shape kGpt2s[] = {
    {"gpt2", 12, 12, 768, "124.4M"},
    {"gpt2-medium", 24, 16, 1024, "354.8M"},
    {"gpt2-large", 36, 20, 1280, "774.0M"},
};

struct Gpt2Config {
  int64_t batch, len, layers, heads, embed, vocab, positions;
  double dropout;
  bool sdpa;
  bool gelu_new;
};

ValueId conv1d(GraphBuilder& b, std::string_view name, ValueId x, int64_t out) {
  return nn::op_module(b, name, "Conv1D", "linear_transposed", {x}, {{"out_features", out}});
}

// NewGELUActivation: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
ValueId gelu_new(GraphBuilder& b, ValueId x) {
  auto act = b.module("act", "NewGELUActivation");
  const ValueId half_x = b.call1("mul_scalar", {x}, {{"value", 0.5}});
  const ValueId cube = b.call1("pow_scalar", {x}, {{"exponent", 3.0}});
  const ValueId inner = b.call1("add", {x, b.call1("mul_scalar", {cube}, {{"value", 0.044715}})});
  const ValueId scaled = b.call1("mul_scalar", {inner}, {{"value", std::sqrt(2.0 / M_PI)}});
  const ValueId t = b.call1("tanh", {scaled});
  return b.call1("mul", {half_x, b.call1("add_scalar", {t}, {{"value", 1.0}})});
}

ValueId split_heads(GraphBuilder& b, ValueId t, const Gpt2Config& g) {
  t = b.call1("view", {t}, {{"shape", Dims{g.batch, g.len, g.heads, g.embed / g.heads}}});
  return b.call1("permute", {t}, {{"dims", Dims{0, 2, 1, 3}}});
}

ValueId attention(GraphBuilder& b, ValueId x, const Gpt2Config& g) {
  auto attn = b.module("attn", "GPT2Attention");
  const ValueId causal = b.parameter("bias", {1, 1, g.positions, g.positions}, true, DType::kBool);
  b.parameter("masked_bias", {}, true);
  const ValueId qkv = conv1d(b, "c_attn", x, 3 * g.embed);
  const auto parts =
      b.call("split", {qkv}, {{"sizes", Dims{g.embed, g.embed, g.embed}}, {"dim", int64_t{2}}});
  const ValueId q = split_heads(b, parts[0], g);
  const ValueId k = split_heads(b, parts[1], g);
  const ValueId v = split_heads(b, parts[2], g);
  ValueId out = kNone;
  if (g.sdpa) {
    out = b.call1("scaled_dot_product_attention", {q, k, v},
                  {{"dropout_p", g.dropout}, {"is_causal", true}});
    out = b.call1("transpose", {out}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
  } else {
    ValueId w = b.call1(
        "matmul", {q, b.call1("transpose", {k}, {{"dim0", int64_t{-1}}, {"dim1", int64_t{-2}}})});
    const std::string dtype(dtype_name(b.value(w).dtype));
    const double root = std::sqrt(static_cast<double>(g.embed) / static_cast<double>(g.heads));
    w = b.call1("div", {w, b.call1("full", {}, {{"value", root}, {"dtype", dtype}})});
    ValueId mask =
        b.call1("slice", {causal}, {{"dim", int64_t{2}}, {"start", int64_t{0}}, {"end", g.len}});
    mask = b.call1("slice", {mask}, {{"dim", int64_t{3}}, {"start", int64_t{0}}, {"end", g.len}});
    const ValueId lowest =
        b.call1("full", {}, {{"value", std::numeric_limits<double>::lowest()}, {"dtype", dtype}});
    w = b.call1("where", {mask, w, lowest});
    w = b.call1("softmax", {w}, {{"dim", int64_t{-1}}});
    if (b.value(w).dtype != b.value(v).dtype) {
      w = b.call1("to_copy", {w}, {{"dtype", std::string(dtype_name(b.value(v).dtype))}});
    }
    w = nn::dropout(b, "attn_dropout", w, g.dropout);
    out = b.call1("matmul", {w, v});
    out = b.call1("permute", {out}, {{"dims", Dims{0, 2, 1, 3}}});
  }
  out = b.call1("contiguous", {out});
  out = b.call1("view", {out}, {{"shape", Dims{g.batch, g.len, g.embed}}});
  out = conv1d(b, "c_proj", out, g.embed);
  return nn::dropout(b, "resid_dropout", out, g.dropout);
}

ValueId block(GraphBuilder& b, ValueId h, const Gpt2Config& g) {
  ValueId x = nn::layer_norm(b, "ln_1", h, 1e-5);
  h = nn::add(b, attention(b, x, g), h);
  x = nn::layer_norm(b, "ln_2", h, 1e-5);
  {
    auto mlp = b.module("mlp", "GPT2MLP");
    x = conv1d(b, "c_fc", x, 4 * g.embed);
    if (g.gelu_new) {
      x = gelu_new(b, x);
    } else {
      x = nn::op_module(b, "act", "GELUTanh", "gelu", {x}, {{"approximate", std::string("tanh")}});
    }
    x = conv1d(b, "c_proj", x, g.embed);
    x = nn::dropout(b, "dropout", x, g.dropout);
  }
  return nn::add(b, h, x);
}

void build_gpt2(GraphBuilder& b, const ModelConfig& c) {
  Gpt2Config g{c.batch,
               c.seq_len,
               c.get_int("n_layer"),
               c.get_int("n_head"),
               c.get_int("n_embd"),
               c.get_int("vocab_size"),
               c.get_int("n_positions"),
               c.get_float("dropout"),
               c.get_string("attention") == "sdpa",
               c.get_string("activation") == "gelu_new"};
  if (b.options().target.torch == TorchVersion::k1_13) g.sdpa = false;
  if (g.len > g.positions) {
    b.fail(invalid_argument(
        fmt::format("--seq-len {} exceeds n_positions {}", g.len, g.positions),
        fmt::format("use --seq-len {} or less, or --set n_positions={}", g.positions, g.len)));
    return;
  }
  if (g.embed % g.heads != 0) {
    b.fail(
        invalid_argument(fmt::format("n_embd {} is not divisible by n_head {}", g.embed, g.heads)));
    return;
  }
  const ValueId ids = b.input("input_ids", {g.batch, g.len}, DType::kInt64);
  const ValueId labels = b.input("labels", {g.batch, g.len}, DType::kInt64);
  ValueId logits = kNone;
  {
    auto model = b.module("", "GPT2LMHeadModel");
    ValueId h = kNone;
    {
      auto transformer = b.module("transformer", "GPT2Model");
      const ValueId tokens =
          nn::op_module(b, "wte", "Embedding", "embedding", {ids},
                        {{"num_embeddings", g.vocab}, {"embedding_dim", g.embed}});
      ValueId positions = b.call1("arange", {}, {{"end", g.len}});
      positions = b.call1("unsqueeze", {positions}, {{"dim", int64_t{0}}});
      const ValueId pos =
          nn::op_module(b, "wpe", "Embedding", "embedding", {positions},
                        {{"num_embeddings", g.positions}, {"embedding_dim", g.embed}});
      h = nn::add(b, tokens, pos);
      h = nn::dropout(b, "drop", h, g.dropout);
      for (int64_t i = 0; i < g.layers; ++i) {
        auto blk = b.module(fmt::format("h.{}", i), "GPT2Block");
        h = block(b, h, g);
      }
      h = nn::layer_norm(b, "ln_f", h, 1e-5);
    }
    // lm_head shares the token embedding's weight: looked up by its state_dict name.
    const ValueId wte_weight = b.parameter("transformer.wte.weight", {g.vocab, g.embed});
    logits = nn::op_module(b, "lm_head", "Linear", "linear", {h},
                           {{"out_features", g.vocab}, {"bias", false}}, {wte_weight});
  }
  const ValueId loss = causal_lm_loss(b, logits, labels, g.vocab);
  b.set_loss(loss);
}

}  // namespace

void add_gpt2_models(std::vector<ModelSpec>& models) {
  for (const Gpt2Shape& s : kGpt2s) {
    ModelSpec m;
    m.name = s.name;
    m.family = "gpt2";
    m.doc =
        fmt::format("Hugging Face GPT2LMHeadModel {} ({} parameters, tied lm_head), causal LM loss",
                    s.name, s.params);
    m.input = InputKind::kSequence;
    m.default_seq_len = 1024;
    m.keys = {
        count_key("n_layer", s.layers, "transformer blocks"),
        {"n_head", AttrKind::kInt, s.heads, "attention heads", {}, 1.0, {}},
        {"n_embd", AttrKind::kInt, s.embed, "model width", {}, 1.0, {}},
        {"vocab_size", AttrKind::kInt, int64_t{50257}, "token vocabulary", {}, 1.0, {}},
        {"n_positions", AttrKind::kInt, int64_t{1024}, "longest sequence", {}, 1.0, {}},
        {"dropout",
         AttrKind::kFloat,
         0.1,
         "embedding, attention and residual dropout",
         {},
         0.0,
         1.0},
        {"attention",
         AttrKind::kString,
         std::string("sdpa"),
         "attention implementation",
         {"sdpa", "eager"},
         {},
         {}},
        {"activation",
         AttrKind::kString,
         std::string("gelu_new"),
         "MLP activation",
         {"gelu_new", "gelu_tanh"},
         {},
         {}},
    };
    m.build = build_gpt2;
    m.checkpoint_families = {{"transformer blocks", {"transformer.h.*"}}};
    m.smaller = [](const ModelConfig& c) {
      std::vector<ModelChange> changes;
      if (const int64_t n = c.get_int("n_layer"); n > 1) {
        changes.push_back(
            {fmt::format("n_layer {} -> {}", n, n / 2), {{"n_layer", std::to_string(n / 2)}}});
      }
      return changes;
    };
    models.push_back(std::move(m));
  }
}

}  // namespace trainfit
