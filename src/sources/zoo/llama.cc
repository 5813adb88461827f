// Decoder-only language models laid out as Hugging Face transformers 4.48 builds LlamaForCausalLM
// and trains it on input_ids and labels (no padding mask): token embedding; decoder layers of
// RMSNorm (in fp32), rotary attention with grouped key/value heads, residual add, RMSNorm, a
// gated MLP (down(act(gate(x)) * up(x))), residual add; a final RMSNorm, lm_head (tied to the
// embedding or not) and the causal LM loss. Mistral and Qwen2 share the layout; Qwen2 adds biases
// to q, k and v; Qwen3 (transformers 4.51) an RMSNorm over each head of q and of k, before the
// rotation. Gemma (gemma=true) scales the embeddings by sqrt(hidden_size), through a CPU scalar
// tensor in their dtype, and its RMSNorm multiplies the normalized fp32 x by (1 + weight) in fp32
// before casting back; its MLP gate is GELU. Gemma 2 (gemma2=true, transformers'
// Gemma2ForCausalLM of early 2025, with the rotary tables shared by the layers) adds a norm after
// the attention and one before and after the MLP, soft-caps eager attention's scores and the
// logits (cap * tanh(x / cap); tanh keeps its output), makes no cache in training, and builds
// the causal mask (seq x seq) under SDPA too, passing it to SDPA instead of is_causal; its even
// layers window the mask through two more (batch, 1, seq, seq) tensors, a bool and one in the
// model's dtype, alive while the layer runs. Gemma 3 (gemma3=true, transformers' current
// Gemma3ForCausalLM, its masks from masking_utils) keeps Gemma 2's layer with RMSNorms over each
// head of q and of k after the transpose, scales the embeddings inside the embedding module by a
// buffer, windows every layer but each sliding_window_pattern-th, remakes its two rotary tables
// (global and local bases) once per layer before the first, and builds its masks once: none for
// SDPA but a bool (1, 1, seq, seq) one on windowed layers once the sequence reaches the window, a
// (batch, 1, seq, seq) one in the model's dtype per layer type for eager; no attention soft-cap,
// and the logits' only when final_logit_softcapping is given. Phi-3 (phi3=true, transformers'
// current Phi3ForCausalLM) fuses q, k and v into one qkv_proj whose result is sliced, and gate and
// up into one gate_up_proj whose result is chunked; it rotates the first partial_rotary_factor of
// each head and concatenates the rest back (a new tensor even when nothing is left over), and puts
// dropout (resid_pdrop) on each residual branch. Mixtral (num_local_experts > 0) replaces the
// MLP with MixtralSparseMoeBlock: a router Linear, softmax in fp32, top-k experts per token,
// their weights renormalized in place, then each expert that receives tokens gathers them,
// runs its own gated MLP (w2(act(w1(x)) * w3(x))), scales by its routing weight and index_adds
// the result into a zero tensor. Routing depends on the data: the estimate assumes the router
// spreads tokens evenly, num_experts_per_tok of every token over all experts (so every expert
// trains). What autograd keeps does not depend on the spread (it is proportional to the tokens
// each expert sees, which sum to tokens x top_k); the transients of the busiest expert do. Keys
// are named as in the model's config.json (see --hf-config).
//
// The SDPA call is current transformers' sdpa_attention_forward: with no mask, k and v go in at
// their own heads with enable_gqa (4.54 and later, on PyTorch 2.5 and later; where the flash
// kernel cannot take them, fp32 say, PyTorch falls back to the math path, which repeats them and
// materializes the scores), and q, k and v go in as they are (4.56 dropped their contiguous
// copies). transformers=4.48 (or sdpa_enable_gqa=false and sdpa_contiguous=true) gives 4.48's
// call.
//
// The release (transformers=, 5.17 by default) decides three more things: 4.48's loss copies
// the shifted fp32 logits where 4.49 pads the labels; from 5.0 from_pretrained loads the weights
// in the config's torch_dtype (dtype="auto"), where earlier releases load them in fp32, which
// is what autocast then trains (bf16 weights under bf16 autocast: nothing for it to cast but
// what the model upcasts itself).
//
// What a training step keeps besides autograd's tensors:
//  - the rotary cos and sin tables (1 x seq x head_dim, made under no_grad) for the whole forward;
//  - eager attention: the causal mask, seq x (seq + 1) in the model's dtype, for the whole forward;
//  - use_cache (config.json's default, true): DynamicCache holds every layer's key (after
//    rotation, before its heads are repeated) and value, and the model returns it with the loss
//    and the logits; like the logits, the training loop holds it to the end of the step.
//
// attention=sdpa (transformers' default) needs PyTorch >= 2.1.1; on PyTorch 1.13 transformers
// falls back to eager attention, and so does this model under the cpu profile.
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "sources/zoo/causal_lm.h"
#include "sources/zoo/nn.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

struct DecoderShape {
  const char* name;
  const char* doc;
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, positions;
  int64_t window;
  double eps, rope_theta;
  bool qkv_bias, tied, qk_norm, gemma, phi3;
  const char* act;
  const char* params;
  int64_t experts = 0;
  bool gemma2 = false;
  bool gemma3 = false;
  const char* torch_dtype = "bfloat16";  // config.json's: the dtype the checkpoint is stored in
};

// Published config.json figures of one model per family: the zoo's defaults. Columns: vocab,
// hidden, intermediate, layers, heads, key/value heads, head_dim, positions, window, eps,
// rope_theta, qkv_bias, tied, qk_norm, gemma, phi3, activation, parameters, experts, gemma2,
// gemma3.
// clang-format off
constexpr DecoderShape kDecoders[] = {
    {"llama", "Meta Llama 3 8B",
     128256, 4096, 14336, 32, 32, 8, 0, 8192, 0, 1e-5, 500000.0,
     false, false, false, false, false, "silu", "8,030,261,248"},
    {"mistral", "Mistral 7B v0.1",
     32000, 4096, 14336, 32, 32, 8, 0, 32768, 4096, 1e-5, 10000.0,
     false, false, false, false, false, "silu", "7,241,732,096"},
    {"qwen2", "Qwen2.5 7B (biases on q, k and v)",
     152064, 3584, 18944, 28, 28, 4, 0, 131072, 0, 1e-6, 1000000.0,
     true, false, false, false, false, "silu", "7,615,616,512"},
    {"qwen3", "Qwen3 8B (RMSNorms on q and k)",
     151936, 4096, 12288, 36, 32, 8, 0, 40960, 0, 1e-6, 1000000.0,
     false, false, true, false, false, "silu", "8,190,735,360"},
    {"gemma", "Google Gemma 7B (GELU, scaled embeddings, (1 + weight) norms)",
     256000, 3072, 24576, 28, 16, 16, 256, 8192, 0, 1e-6, 10000.0,
     false, true, false, true, false, "gelu_pytorch_tanh", "8,537,680,896"},
    {"gemma2", "Google Gemma 2 9B (four norms a layer, soft-capping, every other layer windowed)",
     256000, 3584, 14336, 42, 16, 8, 256, 8192, 4096, 1e-6, 10000.0,
     false, true, false, true, false, "gelu_pytorch_tanh", "9,241,705,984", 0, true, false,
     "float32"},
    {"gemma3", "Google Gemma 3 1B (Gemma 2's layer with RMSNorms on q and k, five windowed "
     "layers to a global one)",
     262144, 1152, 6912, 26, 4, 1, 256, 32768, 512, 1e-6, 1000000.0,
     false, true, false, true, false, "gelu_pytorch_tanh", "999,885,952", 0, false, true},
    {"phi3", "Microsoft Phi-3.5 mini (fused qkv_proj and gate_up_proj)",
     32064, 3072, 8192, 32, 32, 32, 0, 131072, 262144, 1e-5, 10000.0,
     false, false, false, false, true, "silu", "3,821,079,552"},
    {"mixtral", "Mistral Mixtral 8x7B (eight experts, two per token)",
     32000, 4096, 14336, 32, 32, 8, 0, 32768, 0, 1e-5, 1000000.0,
     false, false, false, false, false, "silu", "46,702,792,704", 8},
};
// clang-format on

struct Decoder {
  int64_t batch, len, layers, hidden, intermediate, heads, kv_heads, head_dim, vocab, positions,
      window;
  double eps, attention_dropout;
  bool qkv_bias, o_bias, mlp_bias, tied, sdpa, use_cache, qk_norm, gemma, phi3;
  std::string act;
  double rotary_factor, resid_dropout;
  int64_t experts, experts_per_token;  // Mixtral's num_local_experts (0: a dense MLP)
  double jitter;                       // router_jitter_noise
  bool gemma2;                         // Gemma 2's layer: four norms, soft-capping, windows
  double attn_softcap, final_softcap;  // attn_logit_softcapping, final_logit_softcapping (0: none)
  int64_t rotary_dim = 0;        // int(head_dim * partial_rotary_factor), set by resolve_shape
  bool flash = false;            // attn_implementation="flash_attention_2"
  bool liger_loss = false;       // loss=fused_linear_cross_entropy (Liger-Kernel)
  bool gemma3 = false;           // Gemma 3's layer, masks and rotary tables
  int64_t window_pattern = 0;    // Gemma 3: every pattern-th layer global (0: none)
  bool sdpa_gqa = true;          // SDPA takes k and v unrepeated (enable_gqa) when there is no mask
  bool sdpa_contiguous = false;  // q, k and v made contiguous before SDPA
  bool shift_logits = false;     // 4.48's loss: a shifted contiguous copy of the fp32 logits
};

// What changes with the transformers release (--set transformers=X.Y), read from each release's
// sources: modeling_utils.py, loss/loss_utils.py, integrations/sdpa_attention.py.
struct Release {
  int major = 5, minor = 17;
  // ForCausalLMLoss before 4.49 shifts the logits (logits[..., :-1, :].contiguous(), a copy of
  // the fp32 upcast) where later releases pad the labels instead.
  bool shift_logits = false;
  bool sdpa_gqa = true;          // use_gqa_in_sdpa: 4.54 and later
  bool sdpa_contiguous = false;  // q, k and v .contiguous() before SDPA: before 4.56
  // from_pretrained's dtype: "auto" (the config's torch_dtype) from 5.0, fp32 before.
  bool loads_config_dtype = true;
};

Result<Release> release(const ModelConfig& c) {
  const std::string& text = c.get_string("transformers");
  Release r;
  const char* hint = "give a release as MAJOR.MINOR, 4.48 or later (5.17, the default, is current)";
  // MAJOR, MAJOR.MINOR or MAJOR.MINOR.PATCH; the patch does not matter.
  int consumed = 0;
  const int parsed =
      std::sscanf(text.c_str(), "%d%n.%d%n", &r.major, &consumed, &r.minor, &consumed);
  const char next = text.c_str()[consumed];
  if (parsed < 1 || text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) ||
      (next != '\0' && next != '.')) {
    return invalid_argument(fmt::format("transformers={} is not a release number", text), hint);
  }
  if (parsed == 1) r.minor = 0;
  if (r.major < 4 || (r.major == 4 && r.minor < 48)) {
    return unsupported(
        fmt::format("transformers {} is older than the oldest release modelled, 4.48", text), hint);
  }
  const auto since = [&r](int major, int minor) {
    return r.major > major || (r.major == major && r.minor >= minor);
  };
  r.shift_logits = !since(4, 49);
  r.sdpa_gqa = since(4, 54);
  r.sdpa_contiguous = !since(4, 56);
  r.loads_config_dtype = since(5, 0);
  const std::string& gqa = c.get_string("sdpa_enable_gqa");
  if (gqa != "auto") r.sdpa_gqa = gqa == "true";
  const std::string& contiguous = c.get_string("sdpa_contiguous");
  if (contiguous != "auto") r.sdpa_contiguous = contiguous == "true";
  return r;
}

// The weights as the model was loaded (from_pretrained's dtype): under autocast they stay so;
// under --precision fp32 or bf16 the precision says what they are, and a dtype that disagrees is
// refused.
Status decoder_options(const ModelConfig& c, BuildOptions& options) {
  TF_ASSIGN_OR_RETURN(const Release r, release(c));
  const std::string& asked = c.get_string("dtype");
  const bool amp = is_amp(options.precision);
  if (!amp) {
    const DType trained =
        options.precision == Precision::kBf16 ? DType::kBFloat16 : DType::kFloat32;
    if (asked != "auto" && parse_dtype(asked) != trained) {
      return invalid_argument(
          fmt::format("dtype={} loads the weights in {}, but --precision {} trains them in {}",
                      asked, asked, precision_name(options.precision), dtype_name(trained)),
          "dtype= says what the weights are under autocast (--precision amp-bf16 or amp-fp16); "
          "leave it out otherwise");
    }
    return {};
  }
  const std::string& loaded = asked != "auto"        ? asked
                              : r.loads_config_dtype ? c.get_string("torch_dtype")
                                                     : "float32";
  options.amp_weights = parse_dtype(loaded).value_or(DType::kFloat32);
  if (options.precision == Precision::kAmpFp16 && options.amp_weights == DType::kFloat16) {
    return unsupported(
        fmt::format("float16 weights{} under amp-fp16: GradScaler refuses to unscale fp16 "
                    "gradients",
                    asked == "auto" ? " (torch_dtype, which from_pretrained loads from 5.0)" : ""),
        "load the model in float32 (--set dtype=float32), or train under --precision amp-bf16");
  }
  return {};
}

// Gemma 2's even layers and, in Gemma 3, all but every window_pattern-th attend through the
// window.
bool windowed(const Decoder& d, int64_t layer) {
  if (d.window == 0) return false;
  if (d.gemma3) return d.window_pattern == 0 || (layer + 1) % d.window_pattern != 0;
  return d.gemma2 && layer % 2 == 0;
}

// LlamaRMSNorm: x in fp32, times rsqrt(mean(x^2) + eps), back to x's dtype, times the weight.
// GemmaRMSNorm: the same fp32 product times (1.0 + weight.float()), then back to x's dtype. The
// caller's reference keeps x alive until the norm returns (`h = self.norm(h)` rebinds after the
// call), even where nothing else needs it (the final norm, a bf16 x's fp32 copy aside).
ValueId rms_norm(GraphBuilder& b, std::string_view name, ValueId x, int64_t width, double eps,
                 bool gemma) {
  auto norm = b.module(name, "RMSNorm");
  if (!b.ok()) return kNone;
  const DType input_dtype = b.value(x).dtype;
  ValueId h = nn::cast(b, x, DType::kFloat32);
  ValueId variance = b.call1("pow_scalar", {h}, {{"exponent", 2.0}});
  variance = b.call1("mean", {variance}, {{"dims", Dims{-1}}, {"keepdim", true}});
  const ValueId scale = b.call1("rsqrt", {b.call1("add_scalar", {variance}, {{"value", eps}})});
  ValueId out = kNone;
  if (gemma) {
    h = b.call1("mul", {h, scale});
    const ValueId weight = nn::cast(b, b.parameter("weight", {width}), DType::kFloat32);
    const ValueId shifted = b.call1("add_scalar", {weight}, {{"value", 1.0}});
    out = nn::cast(b, b.call1("mul", {h, shifted}), input_dtype);
  } else {
    // `hidden_states`, rebound to the normalized fp32 x, lives until the norm returns, beside its
    // cast back to the input's dtype.
    const ValueId normalized = b.call1("mul", {h, scale});
    h = nn::cast(b, normalized, input_dtype);
    const ValueId weight = b.parameter("weight", {width});
    out = b.call1("mul", {weight, h});
    nn::hold(b, {variance, normalized});
  }
  nn::hold(b, {x});
  return out;
}

// The rotary tables, as LlamaRotaryEmbedding makes them under no_grad: the positions in fp32,
// freqs = inv_freq (x) positions, emb = cat(freqs, freqs), cos and sin of emb, each scaled by 1.0
// and cast to the activations' dtype. Only their bytes and lifetimes matter: the product, cos and
// sin stand in as tensors of their shape. Gemma3RotaryEmbedding scales cos before it makes sin.
// `buffer` names the inv_freq buffer the call registers (none when empty).
std::pair<ValueId, ValueId> rotary_tables(GraphBuilder& b, ValueId like, const Decoder& d,
                                          std::string_view buffer) {
  auto rotary = b.module("rotary_emb", d.gemma3 ? "Gemma3RotaryEmbedding" : "LlamaRotaryEmbedding");
  if (!buffer.empty()) {
    b.parameter(buffer, {d.rotary_dim / 2}, /*buffer=*/true, DType::kFloat32);
  }
  const std::string fp32("float32");
  const ValueId positions = b.call1("full", {}, {{"shape", Dims{1, 1, d.len}}, {"dtype", fp32}});
  const ValueId freqs =
      b.call1("full", {}, {{"shape", Dims{1, d.rotary_dim / 2, d.len}}, {"dtype", fp32}});
  const ValueId rows = b.call1("transpose", {freqs}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
  const ValueId emb = b.call1("cat", {rows, rows}, {{"dim", int64_t{-1}}});
  auto scaled = [&](ValueId t) { return b.call1("mul_scalar", {t}, {{"value", 1.0}}); };
  ValueId cos = kNone;
  ValueId sin = kNone;
  if (d.gemma3) {
    cos = scaled(b.call1("full", {emb}, {{"dtype", fp32}}));
    sin = scaled(b.call1("full", {emb}, {{"dtype", fp32}}));
  } else {
    cos = b.call1("full", {emb}, {{"dtype", fp32}});
    sin = b.call1("full", {emb}, {{"dtype", fp32}});
    cos = scaled(cos);
    sin = scaled(sin);
  }
  if (!b.ok()) return {kNone, kNone};
  const DType dtype = b.value(like).dtype;
  const ValueId cos_out = nn::cast(b, cos, dtype);
  const ValueId sin_out = nn::cast(b, sin, dtype);
  nn::hold(b, {positions, freqs, emb, cos, sin});
  return {cos_out, sin_out};
}

// The additive causal mask (_prepare_4d_causal_attention_mask_with_cache_position) over `keys`
// positions: full((seq, keys), min) -> triu(1) -> *= arange(keys) > cache_position[:, None],
// expanded to (batch, 1, seq, keys). LlamaModel's eager path makes it over seq + 1 keys,
// Gemma2Model's eager and SDPA paths over seq. triu and the comparison stand in as tensors of
// their shape.
ValueId causal_mask(GraphBuilder& b, ValueId cache_position, const Decoder& d, DType dtype,
                    int64_t keys) {
  const std::string name(dtype_name(dtype));
  const Dims shape{d.len, keys};
  ValueId mask = b.call1("full", {}, {{"shape", shape}, {"dtype", name}});
  mask = b.call1("full", {mask}, {{"dtype", name}});  // triu
  const ValueId columns = b.call1("arange", {}, {{"end", keys}});
  const ValueId later = b.call1("full", {}, {{"shape", shape}, {"dtype", std::string("bool")}});
  nn::hold(b, {columns, cache_position});  // read by the comparison
  mask = b.call1("mul", {mask, later}, {{"inplace", true}});
  mask = b.call1("unsqueeze", {b.call1("unsqueeze", {mask}, {{"dim", int64_t{0}}})},
                 {{"dim", int64_t{0}}});
  return b.call1("expand", {mask}, {{"sizes", Dims{d.batch, 1, -1, -1}}});
}

// Gemma2DecoderLayer's mask on a windowed layer: tril(ones_like(mask, bool), -window), then
// where(that, min, mask), both dense (batch, 1, seq, seq) locals until the layer returns (the
// slice to max(seq, window) columns that follows is a view). ones_like and tril stand in as bool
// tensors of the mask's shape; min is a Python float, wrapped as a 0-dim float64 CPU tensor.
// Returns the tril and the windowed mask.
std::pair<ValueId, ValueId> sliding_mask(GraphBuilder& b, ValueId mask) {
  const std::string boolean("bool");
  const ValueId ones = b.call1("full", {mask}, {{"dtype", boolean}});
  const ValueId far = b.call1("full", {ones}, {{"dtype", boolean}});  // tril
  const ValueId min =
      b.call1("full", {}, {{"shape", Dims{}}, {"dtype", std::string("float64")}, {"host", true}});
  return {far, b.call1("where", {far, min, mask})};
}

// masking_utils' find_packed_sequence_indices on the position ids, which every mask of a
// training step (no padding mask, no cache) starts with: position_ids[:, :1] - 1, torch.diff with
// that prepended (a cat, then the difference), != 1, cumsum, and whether the last column is all
// zero. Stand-ins of their shapes; none is kept.
void packed_sequence_check(GraphBuilder& b, const Decoder& d) {
  const std::string int64("int64");
  const std::string boolean("bool");
  const ValueId first = b.call1("full", {}, {{"shape", Dims{d.batch, 1}}, {"dtype", int64}});
  const ValueId joined =
      b.call1("full", {}, {{"shape", Dims{d.batch, d.len + 1}}, {"dtype", int64}});
  const ValueId diff = b.call1("full", {}, {{"shape", Dims{d.batch, d.len}}, {"dtype", int64}});
  nn::hold(b, {joined});
  const ValueId starts = b.call1("full", {diff}, {{"dtype", boolean}});
  const ValueId packed = b.call1("full", {starts}, {{"dtype", int64}});
  const ValueId last = b.call1("full", {}, {{"shape", Dims{d.batch}}, {"dtype", boolean}});
  b.call1("full", {}, {{"shape", Dims{}}, {"dtype", boolean}});  // .all()
  nn::hold(b, {last, first, diff, packed});
}

// masking_utils' sdpa_mask with no padding mask: aranges over the batch, one head, the queries
// and the keys (those two offset by 0, a new tensor each), and the mask function broadcast over
// them into one (1, 1, seq, seq) bool tensor, expanded to the batch (a view). Causal: kv <= q.
// Windowed (and_masks): a 0-dim True, & (kv > q - window), & (kv <= q), each step a new tensor
// that frees the one before.
ValueId bool_mask(GraphBuilder& b, const Decoder& d, bool sliding) {
  const std::string boolean("bool");
  const ValueId batch = b.call1("arange", {}, {{"end", d.batch}});
  const ValueId head = b.call1("arange", {}, {{"end", int64_t{1}}});
  auto positions = [&] {
    return b.call1("full", {b.call1("arange", {}, {{"end", d.len}})},
                   {{"dtype", std::string("int64")}});
  };
  const ValueId queries = positions();
  const ValueId keys = positions();
  const Dims square{1, 1, d.len, d.len};
  auto compare = [&] { return b.call1("full", {}, {{"shape", square}, {"dtype", boolean}}); };
  ValueId mask = kNone;
  if (sliding) {
    const ValueId all = b.call1("full", {}, {{"shape", Dims{}}, {"dtype", boolean}});
    const ValueId shifted =
        b.call1("full", {}, {{"shape", Dims{1, 1, d.len, 1}}, {"dtype", std::string("int64")}});
    const ValueId inside = compare();
    nn::hold(b, {shifted});
    const ValueId near = compare();
    nn::hold(b, {all, inside});
    const ValueId causal = compare();
    mask = compare();
    nn::hold(b, {near, causal});
  } else {
    mask = compare();
  }
  nn::hold(b, {batch, head, queries, keys});
  return b.call1("expand", {mask}, {{"sizes", Dims{d.batch, 1, d.len, d.len}}});
}

// Gemma3TextModel's masks, one for its global layers and one for its windowed ones
// (create_causal_mask, create_sliding_window_causal_mask). SDPA gets none where is_causal does
// the same (always for the global layers; for the windowed ones when the sequence is shorter than
// the window), else sdpa_mask's bool mask. Eager gets eager_mask's: that bool mask turned into
// torch.where(mask, 0-dim zero in the model's dtype, min), a dense (batch, 1, seq, seq) tensor.
// Flash-attention gets none. Both live until the forward returns.
std::pair<ValueId, ValueId> gemma3_masks(GraphBuilder& b, const Decoder& d, DType dtype) {
  std::pair<ValueId, ValueId> masks{kNone, kNone};
  for (const bool sliding : {false, true}) {
    packed_sequence_check(b, d);
    if (d.flash || (d.sdpa && (!sliding || d.len < d.window))) continue;
    ValueId mask = bool_mask(b, d, sliding);
    if (!d.sdpa) {
      const std::string name(dtype_name(dtype));
      const ValueId zero = b.call1("full", {}, {{"shape", Dims{}}, {"dtype", name}});
      // min is a Python float, wrapped as a 0-dim CPU tensor that does not promote.
      const ValueId min = b.call1("full", {}, {{"shape", Dims{}}, {"dtype", name}, {"host", true}});
      mask = b.call1("where", {mask, zero, min});
    }
    (sliding ? masks.second : masks.first) = mask;
  }
  return masks;
}

// Gemma 2's soft-capping, cap * tanh(x / cap): tanh keeps its output.
ValueId softcap(GraphBuilder& b, ValueId x, double cap) {
  x = b.call1("div_scalar", {x}, {{"value", cap}});
  x = b.call1("tanh", {x});
  return b.call1("mul_scalar", {x}, {{"value", cap}});
}

// rotate_half(x) = cat(-x[..., half:], x[..., :half])
ValueId rotate_half(GraphBuilder& b, ValueId x, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const ValueId x1 = b.call1("slice", {x}, {{"dim", int64_t{-1}}, {"end", half}});
  const ValueId x2 = b.call1("slice", {x}, {{"dim", int64_t{-1}}, {"start", half}});
  return b.call1("cat", {b.call1("neg", {x2}), x1}, {{"dim", int64_t{-1}}});
}

ValueId rotate(GraphBuilder& b, ValueId x, ValueId cos, ValueId sin, int64_t head_dim) {
  return b.call1("add",
                 {b.call1("mul", {x, cos}), b.call1("mul", {rotate_half(b, x, head_dim), sin})});
}

// Phi-3's apply_rotary_pos_emb: cat([rotate(x[..., :r]), x[..., r:]]). A slice to the end of a
// dim is the tensor itself in Python, so x[..., :head_dim] is x; x[..., head_dim:] is an empty
// slice, whose gradient is still a zero tensor of x's shape.
ValueId rotate_partial(GraphBuilder& b, ValueId x, ValueId cos, ValueId sin, const Decoder& d) {
  const ValueId head = d.rotary_dim == d.head_dim
                           ? x
                           : b.call1("slice", {x}, {{"dim", int64_t{-1}}, {"end", d.rotary_dim}});
  const ValueId rest = b.call1("slice", {x}, {{"dim", int64_t{-1}}, {"start", d.rotary_dim}});
  return b.call1("cat", {rotate(b, head, cos, sin, d.rotary_dim), rest}, {{"dim", int64_t{-1}}});
}

// repeat_kv: (b, kv, s, d) -> (b, kv * n, s, d) through expand and a reshape copy.
ValueId repeat_kv(GraphBuilder& b, ValueId x, const Decoder& d) {
  const int64_t n = d.heads / d.kv_heads;
  if (n == 1) return x;
  x = b.call1("unsqueeze", {x}, {{"dim", int64_t{2}}});
  x = b.call1("expand", {x}, {{"sizes", Dims{d.batch, d.kv_heads, n, d.len, d.head_dim}}});
  return b.call1("reshape", {x}, {{"shape", Dims{d.batch, d.heads, d.len, d.head_dim}}});
}

struct Cached {
  ValueId key = kNone, value = kNone;
};

// transformers' flash_attention_2 (integrations/flash_attention.py, then
// modeling_flash_attention_utils.py's _flash_attention_forward): q, k and v transposed to
// (B, L, H, D), views, k and v with their own heads; position_ids checked to increase
// (torch.diff, >= 0, all(): stand-ins of their shape); flash_attn_func, causal, whose
// (B, L, H, D) output the attention reshapes, a view. The window and the soft-cap are the
// kernel's arguments.
ValueId flash_attention(GraphBuilder& b, ValueId q, ValueId k, ValueId v, const Decoder& d) {
  auto to_rows = [&](ValueId t) {
    return b.call1("transpose", {t}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
  };
  const Dims steps{1, d.len - 1};
  b.call1("full", {}, {{"shape", steps}, {"dtype", std::string("int64")}});
  b.call1("full", {}, {{"shape", steps}, {"dtype", std::string("bool")}});
  b.call1("full", {}, {{"shape", Dims{}}, {"dtype", std::string("bool")}});
  return b
      .call("flash_attn", {to_rows(q), to_rows(k), to_rows(v)},
            {{"dropout_p", d.attention_dropout}, {"causal", true}})
      .front();
}

// sdpa_attention_forward or eager_attention_forward: k and v repeated to every query head (but
// for SDPA's enable_gqa), the (B, L, H, D) result made contiguous.
ValueId sdpa_or_eager(GraphBuilder& b, ValueId q, ValueId k, ValueId v, ValueId mask,
                      const Decoder& d) {
  // use_gqa_in_sdpa (transformers 4.54 and later, on PyTorch 2.5 and later): SDPA gets k and v
  // at their own heads, with enable_gqa, when there is no mask and (since 2026) heads no wider
  // than 256.
  const bool gqa =
      d.sdpa && d.sdpa_gqa && mask == kNone && d.kv_heads != d.heads && d.head_dim <= 256;
  if (!gqa) {
    k = repeat_kv(b, k, d);
    v = repeat_kv(b, v, d);
  }
  ValueId out = kNone;
  const double scaling = 1.0 / std::sqrt(static_cast<double>(d.head_dim));
  if (mask != kNone) mask = b.call1("slice", {mask}, {{"dim", int64_t{3}}, {"end", d.len}});
  if (d.sdpa) {
    // sdpa_attention_forward: causal through is_causal when there is no mask (Gemma 2 passes its
    // mask, and SDPA takes no soft-cap). Before transformers 4.56 it made q, k and v contiguous
    // first (a workaround for PyTorch 2.1's memory-efficient kernel).
    if (d.sdpa_contiguous) {
      q = b.call1("contiguous", {q});
      k = b.call1("contiguous", {k});
      v = b.call1("contiguous", {v});
    }
    std::vector<ValueId> in{q, k, v};
    if (mask != kNone) in.push_back(mask);
    out = b.call1(
        "scaled_dot_product_attention", in,
        {{"dropout_p", d.attention_dropout}, {"is_causal", mask == kNone}, {"enable_gqa", gqa}});
  } else {
    ValueId w = b.call1(
        "matmul", {q, b.call1("transpose", {k}, {{"dim0", int64_t{2}}, {"dim1", int64_t{3}}})});
    w = b.call1("mul_scalar", {w}, {{"value", scaling}});
    if (d.attn_softcap > 0) w = softcap(b, w, d.attn_softcap);
    w = b.call1("add", {w, mask});
    w = b.call1("softmax", {w}, {{"dim", int64_t{-1}}, {"dtype", std::string("float32")}});
    if (b.ok()) w = nn::cast(b, w, b.value(q).dtype);
    w = nn::dropout(b, "attention_dropout", w, d.attention_dropout);
    out = b.call1("matmul", {w, v});
  }
  return b.call1("contiguous",
                 {b.call1("transpose", {out}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}})});
}

ValueId attention(GraphBuilder& b, ValueId x, ValueId cos, ValueId sin, ValueId mask,
                  const Decoder& d, Cached& cached) {
  auto attn = b.module("self_attn", "LlamaAttention");
  const Dims hidden_shape{d.batch, d.len, -1, d.head_dim};
  // A projection's result as (batch, heads, seq, head_dim). (Qwen3: the head's RMSNorm before the
  // transpose.)
  auto to_heads = [&](ValueId t, std::string_view norm) {
    t = b.call1("view", {t}, {{"shape", hidden_shape}});
    if (!norm.empty()) t = rms_norm(b, norm, t, d.head_dim, d.eps, d.gemma);
    return b.call1("transpose", {t}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
  };
  ValueId q = kNone;
  ValueId k = kNone;
  ValueId v = kNone;
  if (d.phi3) {
    // Phi3Attention: one qkv_proj, sliced into q, k and v (views of its result).
    const int64_t q_width = d.heads * d.head_dim;
    const int64_t kv_width = d.kv_heads * d.head_dim;
    const ValueId qkv = nn::linear(b, "qkv_proj", x, q_width + 2 * kv_width, false);
    auto part = [&](int64_t start, int64_t end) {
      return to_heads(
          b.call1("slice", {qkv}, {{"dim", int64_t{-1}}, {"start", start}, {"end", end}}), "");
    };
    q = part(0, q_width);
    k = part(q_width, q_width + kv_width);
    v = part(q_width + kv_width, std::numeric_limits<int64_t>::max());
  } else {
    auto heads = [&](std::string_view name, int64_t n_heads, std::string_view norm) {
      return to_heads(nn::linear(b, name, x, n_heads * d.head_dim, d.qkv_bias), norm);
    };
    q = heads("q_proj", d.heads, d.qk_norm ? "q_norm" : "");
    k = heads("k_proj", d.kv_heads, d.qk_norm ? "k_norm" : "");
    v = heads("v_proj", d.kv_heads, "");
    if (d.gemma3) {
      // Gemma3Attention: the three projections, then RMSNorms over the transposed heads.
      q = rms_norm(b, "q_norm", q, d.head_dim, d.eps, d.gemma);
      k = rms_norm(b, "k_norm", k, d.head_dim, d.eps, d.gemma);
    }
  }
  cos = b.call1("unsqueeze", {cos}, {{"dim", int64_t{1}}});
  sin = b.call1("unsqueeze", {sin}, {{"dim", int64_t{1}}});
  if (d.phi3) {
    q = rotate_partial(b, q, cos, sin, d);
    k = rotate_partial(b, k, cos, sin, d);
  } else {
    q = rotate(b, q, cos, sin, d.head_dim);
    k = rotate(b, k, cos, sin, d.head_dim);
  }
  if (d.use_cache) cached = {k, v};
  const ValueId rotated_q = q;
  const ValueId rotated_k = k;
  const ValueId unrepeated_v = v;
  const ValueId rows =
      d.flash ? flash_attention(b, q, k, v, d) : sdpa_or_eager(b, q, k, v, mask, d);
  const ValueId out = b.call1("reshape", {rows}, {{"shape", Dims{d.batch, d.len, -1}}});
  const ValueId projected = nn::linear(b, "o_proj", out, d.hidden, d.o_bias);
  nn::hold(b, {rotated_q, rotated_k, unrepeated_v});  // the forward's locals
  return projected;
}

ValueId activation(GraphBuilder& b, std::string_view name, ValueId x, const Decoder& d) {
  if (d.act == "silu") return nn::op_module(b, name, "SiLU", "silu", {x});
  return nn::gelu(b, name, x, /*tanh=*/d.act == "gelu_pytorch_tanh");
}

ValueId mlp(GraphBuilder& b, ValueId x, const Decoder& d) {
  auto mlp = b.module("mlp", "LlamaMLP");
  if (d.phi3) {
    // Phi3MLP: gate, up = gate_up_proj(x).chunk(2, -1); down(up * act(gate)).
    const ValueId both = nn::linear(b, "gate_up_proj", x, 2 * d.intermediate, false);
    const std::vector<ValueId> halves =
        b.call("chunk", {both}, {{"chunks", int64_t{2}}, {"dim", int64_t{-1}}});
    if (halves.size() != 2) return kNone;
    const ValueId gate = activation(b, "activation_fn", halves[0], d);
    return nn::linear(b, "down_proj", b.call1("mul", {halves[1], gate}), d.hidden, false);
  }
  const ValueId gate =
      activation(b, "act_fn", nn::linear(b, "gate_proj", x, d.intermediate, d.mlp_bias), d);
  const ValueId up = nn::linear(b, "up_proj", x, d.intermediate, d.mlp_bias);
  return nn::linear(b, "down_proj", b.call1("mul", {gate, up}), d.hidden, d.mlp_bias);
}

// Mixtral's expert: MixtralBlockSparseTop2MLP, w2(act(w1(x)) * w3(x)).
ValueId expert_mlp(GraphBuilder& b, ValueId x, const Decoder& d) {
  const ValueId gate = activation(b, "act_fn", nn::linear(b, "w1", x, d.intermediate, false), d);
  const ValueId up = nn::linear(b, "w3", x, d.intermediate, false);
  return nn::linear(b, "w2", b.call1("mul", {gate, up}), d.hidden, false);
}

// MixtralSparseMoeBlock's forward, looping over the experts that receive tokens (all of them,
// with tokens spread evenly). The index tensors routing makes (one_hot's mask, its sums, the
// experts hit, each expert's row of the mask and nonzero's positions) stand in as int64 and
// bool tensors of their shapes: they need no gradient. Returns the output and the router's
// logits (a local of the decoder layer until it returns).
std::pair<ValueId, ValueId> sparse_moe(GraphBuilder& b, ValueId x, const Decoder& d) {
  auto moe = b.module("block_sparse_moe", "MixtralSparseMoeBlock");
  const int64_t tokens = d.batch * d.len;
  const int64_t k = d.experts_per_token;
  const std::string int64("int64");
  if (d.jitter > 0 && b.ok()) {
    // hidden_states *= torch.empty_like(hidden_states).uniform_(1 - jitter, 1 + jitter)
    const ValueId noise =
        b.call1("full", {x}, {{"dtype", std::string(dtype_name(b.value(x).dtype))}});
    x = b.call1("mul", {x, noise}, {{"inplace", true}});
  }
  const ValueId h = b.call1("view", {x}, {{"shape", Dims{tokens, d.hidden}}});
  const ValueId router_logits = nn::linear(b, "gate", h, d.experts, false);
  ValueId weights =
      b.call1("softmax", {router_logits}, {{"dim", int64_t{1}}, {"dtype", std::string("float32")}});
  const std::vector<ValueId> top = b.call("topk", {weights}, {{"k", k}, {"dim", int64_t{-1}}});
  if (top.size() != 2 || !b.ok()) return {kNone, kNone};
  weights = top[0];
  const ValueId total = b.call1("sum", {weights}, {{"dims", Dims{-1}}, {"keepdim", true}});
  weights = b.call1("div", {weights, total}, {{"inplace", true}});
  weights = nn::cast(b, weights, b.value(h).dtype);
  ValueId out = b.call1(
      "full", {},
      {{"shape", Dims{tokens, d.hidden}}, {"dtype", std::string(dtype_name(b.value(h).dtype))}});
  ValueId mask = b.call1("full", {}, {{"shape", Dims{tokens, k, d.experts}}, {"dtype", int64}});
  mask = b.call1("permute", {mask}, {{"dims", Dims{2, 1, 0}}});
  // expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
  b.call1("full", {}, {{"shape", Dims{d.experts}}, {"dtype", int64}});
  b.call1("full", {}, {{"shape", Dims{d.experts}}, {"dtype", std::string("bool")}});
  const ValueId expert_hit = b.call1("full", {}, {{"shape", Dims{d.experts, 1}}, {"dtype", int64}});
  const ValueId routing = b.call1("unsqueeze", {weights}, {{"dim", int64_t{2}}});
  const ValueId rows = b.call1("unsqueeze", {h}, {{"dim", int64_t{0}}});
  std::vector<ValueId> last;  // the loop's variables outlive it
  for (int64_t e = 0; e < d.experts; ++e) {
    // The expert's share: tokens x k spread over the experts, the first ones taking the rest.
    const int64_t n = tokens * k / d.experts + (e < tokens * k % d.experts ? 1 : 0);
    // idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
    b.call1("full", {}, {{"shape", Dims{1, k, tokens}}, {"dtype", int64}});
    const ValueId where = b.call1("full", {}, {{"shape", Dims{n, 2}}, {"dtype", int64}});
    const std::vector<ValueId> pos = b.call("unbind", {where}, {{"dim", int64_t{1}}});
    if (pos.size() != 2 || !b.ok()) return {kNone, kNone};
    const ValueId slot = pos[0];
    const ValueId token = pos[1];
    ValueId state = b.call1("index", {rows, token}, {{"dim", int64_t{1}}});
    state = b.call1("reshape", {state}, {{"shape", Dims{-1, d.hidden}}});
    ValueId y = kNone;
    {
      auto expert = b.module(fmt::format("experts.{}", e), "MixtralBlockSparseTop2MLP");
      y = expert_mlp(b, state, d);
    }
    const ValueId scale = b.call1("index", {routing, token, slot}, {{"dim", int64_t{0}}});
    y = nn::cast(b, b.call1("mul", {y, scale}), b.value(h).dtype);
    out = b.call1("index_add", {out, token, y}, {{"dim", int64_t{0}}});
    last = {where, state, y};
  }
  for (const ValueId v : last) nn::hold(b, {v});
  nn::hold(b, {h, top[1], weights, mask, expert_hit});  // the forward's locals
  out = b.call1("reshape", {out}, {{"shape", Dims{d.batch, d.len, d.hidden}}});
  return {out, router_logits};
}

std::vector<std::string> registration_order(const Decoder& d) {
  std::vector<std::string> order{"model.embed_tokens."};
  // Each layer's attention (its projections, then its norms: Qwen3's q_norm and k_norm), as its
  // __init__ registers them: Phi3Attention registers o_proj before qkv_proj. Then the feed-forward
  // block: Mixtral's router, then each expert's w1, w2 and w3 (its forward makes w3 before w2).
  std::vector<std::string> parts;
  if (d.phi3) {
    parts = {"self_attn.o_proj", "self_attn.qkv_proj"};
  } else {
    parts = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
             "self_attn"};
  }
  if (d.experts > 0) {
    parts.emplace_back("block_sparse_moe.gate");
    for (int64_t e = 0; e < d.experts; ++e) {
      for (const char* w : {"w1", "w2", "w3"}) {
        parts.push_back(fmt::format("block_sparse_moe.experts.{}.{}", e, w));
      }
    }
  } else {
    parts.emplace_back("mlp");
  }
  parts.emplace_back("input_layernorm");
  parts.emplace_back("post_attention_layernorm");
  if (d.gemma2 || d.gemma3) {
    parts.emplace_back("pre_feedforward_layernorm");
    parts.emplace_back("post_feedforward_layernorm");
  }
  for (int64_t i = 0; i < d.layers; ++i) {
    for (const std::string& part : parts) {
      order.push_back(fmt::format("model.layers.{}.{}.", i, part));
    }
  }
  order.emplace_back("model.norm.");
  order.emplace_back("model.rotary_emb.");
  order.emplace_back("lm_head.");
  return order;
}

// Fills in head_dim (hidden_size / num_attention_heads when 0) and checks that the shape is one
// transformers can build and this model covers.
Status resolve_shape(Decoder& d) {
  if (d.head_dim == 0) {
    if (d.hidden % d.heads != 0) {
      return invalid_argument(
          fmt::format("hidden_size {} is not divisible by num_attention_heads {}", d.hidden,
                      d.heads),
          "give head_dim, or a hidden_size that is a multiple of num_attention_heads");
    }
    d.head_dim = d.hidden / d.heads;
  }
  if (d.heads % d.kv_heads != 0) {
    return invalid_argument(
        fmt::format("num_attention_heads {} is not divisible by num_key_value_heads {}", d.heads,
                    d.kv_heads),
        "each key/value head serves a whole number of query heads");
  }
  if (d.experts > 0 && (d.experts_per_token < 1 || d.experts_per_token > d.experts)) {
    return invalid_argument(
        fmt::format("num_experts_per_tok {} is not between 1 and num_local_experts {}",
                    d.experts_per_token, d.experts),
        "each token goes to at least one expert and at most all of them");
  }
  if (d.experts > 0 && d.phi3) {
    return invalid_argument("num_local_experts needs phi3=false",
                            "the mixture-of-experts block is Mixtral's");
  }
  if (d.gemma2 && (!d.gemma || d.phi3 || d.experts > 0 || d.qk_norm)) {
    return invalid_argument(
        "gemma2 needs gemma=true, phi3=false, qk_norm=false and num_local_experts=0",
        "Gemma 2's layer is Gemma's with four norms; it has no fused projections or experts");
  }
  if (d.gemma3 && (!d.gemma || d.gemma2 || d.phi3 || d.experts > 0 || d.qk_norm)) {
    return invalid_argument(
        "gemma3 needs gemma=true, gemma2=false, phi3=false, qk_norm=false and num_local_experts=0",
        "Gemma 3's layer is Gemma 2's with its own RMSNorms on q and k (not Qwen3's qk_norm)");
  }
  if (d.gemma3 && d.window == 0) {
    return invalid_argument("gemma3 needs a sliding_window",
                            "Gemma 3's windowed layers attend over the last sliding_window tokens "
                            "(Gemma3TextConfig's default is 4096)");
  }
  if (!d.gemma2 && d.attn_softcap > 0) {
    return invalid_argument("attn_logit_softcapping needs gemma2=true",
                            "only Gemma 2 soft-caps its attention scores; set "
                            "attn_logit_softcapping to 0 for other families");
  }
  if (!d.gemma2 && !d.gemma3 && d.final_softcap > 0) {
    return invalid_argument(
        "final_logit_softcapping needs gemma2=true or gemma3=true",
        "only Gemma 2 and 3 soft-cap their logits; set final_logit_softcapping to 0 for other "
        "families");
  }
  if (!d.phi3 && d.rotary_factor != 1.0) {
    return invalid_argument(
        fmt::format("partial_rotary_factor {} needs phi3=true", d.rotary_factor),
        "only Phi-3's attention rotates part of each head; other families rotate all of it");
  }
  // Phi3RotaryEmbedding: int(head_dim * partial_rotary_factor) dimensions, in pairs.
  d.rotary_dim = static_cast<int64_t>(static_cast<double>(d.head_dim) * d.rotary_factor);
  if (d.rotary_dim % 2 != 0 || d.rotary_dim == 0) {
    return invalid_argument(
        fmt::format("the rotary width {} (head_dim {} x partial_rotary_factor {}) is {}",
                    d.rotary_dim, d.head_dim, d.rotary_factor, d.rotary_dim == 0 ? "zero" : "odd"),
        "rotary embeddings rotate pairs of dimensions");
  }
  if (d.len > d.positions) {
    return invalid_argument(
        fmt::format("--seq-len {} exceeds max_position_embeddings {}", d.len, d.positions),
        fmt::format("use --seq-len {} or less, or --set max_position_embeddings={}", d.positions,
                    d.len));
  }
  // Gemma 2 and 3 mask their windowed layers whatever the length (sliding_mask, gemma3_masks);
  // flash-attention windows inside the kernel.
  if (d.window > 0 && d.len >= d.window && !d.gemma2 && !d.gemma3 && !d.flash) {
    return invalid_argument(
        fmt::format("--seq-len {} reaches sliding_window {}: transformers then builds a (batch, 1, "
                    "seq, seq) attention mask, which is not modelled yet",
                    d.len, d.window),
        fmt::format("use --seq-len {} or less, or --set attention=flash_attention_2 (which "
                    "windows inside the kernel)",
                    d.window - 1));
  }
  return {};
}

// The token embeddings. Gemma3TextScaledWordEmbedding multiplies them, inside the module, by its
// embed_scale buffer (0-dim, in the model's dtype, on the device): the module's output, which
// enable_input_require_grads marks, is the scaled one.
ValueId embed_tokens(GraphBuilder& b, ValueId ids, const Decoder& d) {
  const Attrs attrs{{"num_embeddings", d.vocab}, {"embedding_dim", d.hidden}};
  if (!d.gemma3) return nn::op_module(b, "embed_tokens", "Embedding", "embedding", {ids}, attrs);
  auto embed = b.module("embed_tokens", "Gemma3TextScaledWordEmbedding");
  const ValueId rows = b.call1("embedding", {ids}, attrs);
  const ValueId scale = b.parameter("embed_scale", {}, /*buffer=*/true);
  return b.call1("mul", {rows, scale});
}

void build_decoder(GraphBuilder& b, const ModelConfig& c) {
  Decoder d{c.batch,
            c.seq_len,
            c.get_int("num_hidden_layers"),
            c.get_int("hidden_size"),
            c.get_int("intermediate_size"),
            c.get_int("num_attention_heads"),
            c.get_int("num_key_value_heads"),
            c.get_int("head_dim"),
            c.get_int("vocab_size"),
            c.get_int("max_position_embeddings"),
            c.get_int("sliding_window"),
            c.get_float("rms_norm_eps"),
            c.get_float("attention_dropout"),
            c.get_bool("attention_bias") || c.get_bool("qkv_bias"),
            c.get_bool("attention_bias"),
            c.get_bool("mlp_bias"),
            c.get_bool("tie_word_embeddings"),
            c.get_string("attention") == "sdpa",
            c.get_bool("use_cache"),
            c.get_bool("qk_norm"),
            c.get_bool("gemma"),
            c.get_bool("phi3"),
            c.get_string("hidden_act"),
            c.get_float("partial_rotary_factor"),
            c.get_float("resid_pdrop"),
            c.get_int("num_local_experts"),
            c.get_int("num_experts_per_tok"),
            c.get_float("router_jitter_noise"),
            c.get_bool("gemma2"),
            c.get_float("attn_logit_softcapping"),
            c.get_float("final_logit_softcapping")};
  d.flash = c.get_string("attention") == "flash_attention_2";
  d.liger_loss = c.get_string("loss") == "fused_linear_cross_entropy";
  d.gemma3 = c.get_bool("gemma3");
  d.window_pattern = c.get_int("sliding_window_pattern");
  const Result<Release> r = release(c);
  if (!r.ok()) {
    b.fail(r.status());
    return;
  }
  d.sdpa_gqa = r->sdpa_gqa;
  d.sdpa_contiguous = r->sdpa_contiguous;
  d.shift_logits = r->shift_logits;
  if (d.flash && b.options().target.device != Device::kCuda) {
    b.fail(unsupported("attention=flash_attention_2 runs on CUDA GPUs only",
                       "use attention=sdpa or eager with the cpu profile"));
    return;
  }
  if (const Status status = resolve_shape(d); !status.ok()) {
    b.fail(status);
    return;
  }
  if (b.options().target.torch == TorchVersion::k1_13) d.sdpa = false;
  // Gemma2Model and Gemma3TextModel make their caches only outside training.
  if (d.gemma2 || d.gemma3) d.use_cache = false;
  b.param_order(registration_order(d));

  const ValueId ids = b.input("input_ids", {d.batch, d.len}, DType::kInt64);
  const ValueId labels = b.input("labels", {d.batch, d.len}, DType::kInt64);
  ValueId logits = kNone;
  ValueId loss = kNone;
  ValueId final_hidden = kNone;
  std::vector<Cached> cache(static_cast<size_t>(d.layers));
  {
    auto model = b.module("", "LlamaForCausalLM");
    ValueId h = kNone;
    {
      auto inner = b.module("model", "LlamaModel");
      const ValueId embeds = embed_tokens(b, ids, d);
      h = embeds;
      // enable_input_require_grads: a forward hook calls requires_grad_() on the embeddings'
      // output, a leaf when their weight is frozen. Its AccumulateGrad node holds it, and so its
      // .grad, until the graph goes with the loss at the step's end.
      if (c.get_bool("input_require_grads") && b.ok() && !b.value(embeds).requires_grad) {
        b.require_grad(embeds);
        b.returns(embeds);
      }
      const ValueId cache_position = b.call1("arange", {}, {{"end", d.len}});
      ValueId mask = kNone;
      ValueId window_mask = kNone;  // Gemma 3's windowed layers'
      if (b.ok() && d.gemma3) {
        std::tie(mask, window_mask) = gemma3_masks(b, d, b.value(h).dtype);
      } else if (b.ok() && !d.flash && (d.gemma2 || !d.sdpa)) {
        mask = causal_mask(b, cache_position, d, b.value(h).dtype, d.gemma2 ? d.len : d.len + 1);
      }
      // The rotary tables (Gemma 3: each layer type's, remade for every layer in turn, the dict
      // keeping the last of each).
      std::pair<ValueId, ValueId> global{kNone, kNone};
      std::pair<ValueId, ValueId> local{kNone, kNone};
      if (d.gemma3) {
        for (int64_t i = 0; i < d.layers && b.ok(); ++i) {
          const bool sliding = windowed(d, i);
          std::pair<ValueId, ValueId>& tables = sliding ? local : global;
          const std::string_view buffer = tables.first != kNone ? ""
                                          : sliding             ? "sliding_attention_inv_freq"
                                                                : "full_attention_inv_freq";
          const std::pair<ValueId, ValueId> old = tables;
          tables = rotary_tables(b, h, d, buffer);
          nn::hold(b, {old.first, old.second});
        }
      } else {
        global = rotary_tables(b, h, d, "inv_freq");
      }
      // GemmaModel: normalizer = torch.tensor(hidden_size ** 0.5, dtype=h.dtype), a CPU scalar.
      ValueId normalizer = kNone;
      if (d.gemma && !d.gemma3 && b.ok()) {
        normalizer = b.call1("full", {},
                             {{"shape", Dims{}},
                              {"dtype", std::string(dtype_name(b.value(h).dtype))},
                              {"host", true}});
        h = b.call1("mul", {h, normalizer});
      }
      for (int64_t i = 0; i < d.layers; ++i) {
        auto layer = b.module(fmt::format("layers.{}", i), "LlamaDecoderLayer");
        // The layer takes cache_position (and position_ids, a view of it): under gradient
        // checkpointing its arguments live until its backward.
        nn::hold(b, {cache_position});
        // The layer's input: LlamaModel's loop variable holds it until the layer returns.
        const ValueId layer_in = h;
        // Gemma 2 windows its even layers (sliding_mask); Gemma 3's windowed layers take their
        // own mask and rotary tables.
        ValueId far = kNone;
        ValueId layer_mask = mask;
        const bool sliding = windowed(d, i);
        const auto [cos, sin] = sliding && d.gemma3 ? local : global;
        if (sliding && d.gemma3) layer_mask = window_mask;
        if (sliding && d.gemma2 && mask != kNone) std::tie(far, layer_mask) = sliding_mask(b, mask);
        // The attention's and the MLP's input (a norm's output) is their forward's argument, and
        // the layer's local: it lives until they return, whether or not autograd keeps it.
        const ValueId attention_in = rms_norm(b, "input_layernorm", h, d.hidden, d.eps, d.gemma);
        ValueId x =
            attention(b, attention_in, cos, sin, layer_mask, d, cache[static_cast<size_t>(i)]);
        nn::hold(b, {attention_in});
        const bool four_norms = d.gemma2 || d.gemma3;
        if (four_norms) x = rms_norm(b, "post_attention_layernorm", x, d.hidden, d.eps, d.gemma);
        if (d.phi3) x = nn::dropout(b, "resid_attn_dropout", x, d.resid_dropout);
        h = nn::add(b, h, x);
        x = rms_norm(b, four_norms ? "pre_feedforward_layernorm" : "post_attention_layernorm", h,
                     d.hidden, d.eps, d.gemma);
        const ValueId mlp_in = x;
        ValueId router_logits = kNone;
        if (d.experts > 0) {
          std::tie(x, router_logits) = sparse_moe(b, x, d);
        } else {
          x = mlp(b, x, d);
        }
        nn::hold(b, {mlp_in});
        if (four_norms) x = rms_norm(b, "post_feedforward_layernorm", x, d.hidden, d.eps, d.gemma);
        if (d.phi3) x = nn::dropout(b, "resid_mlp_dropout", x, d.resid_dropout);
        h = nn::add(b, h, x);
        // The layer's locals until it returns.
        nn::hold(b, {router_logits, far, far != kNone ? layer_mask : kNone, layer_in});
      }
      h = rms_norm(b, "norm", h, d.hidden, d.eps, d.gemma);
      nn::hold(b, {embeds, normalizer, cache_position, mask, window_mask, global.first,
                   global.second, local.first, local.second});  // the forward's locals
    }
    final_hidden = h;
    std::vector<ValueId> head_weight;
    if (d.tied)
      head_weight.push_back(b.parameter("model.embed_tokens.weight", {d.vocab, d.hidden}));
    if (d.liger_loss) {
      // Liger's lce_forward passes lm_head.weight to its loss and never calls lm_head: there
      // are no logits to return.
      if (!d.tied) {
        auto head = b.module("lm_head", "Linear");
        head_weight.push_back(b.parameter("weight", {d.vocab, d.hidden}));
      }
      loss = liger_causal_lm_loss(b, h, labels, head_weight.front(), d.final_softcap);
    } else {
      h = b.call1("slice", {h}, {{"dim", int64_t{1}}, {"start", int64_t{0}}});
      logits = nn::op_module(b, "lm_head", "Linear", "linear", {h},
                             {{"out_features", d.vocab}, {"bias", false}}, head_weight);
      if (d.final_softcap > 0) logits = softcap(b, logits, d.final_softcap);
    }
  }
  if (!d.liger_loss) {
    loss = causal_lm_loss(b, logits, labels, d.vocab, d.shift_logits);
    // transformers computes the loss inside the model's forward: its locals (the last hidden
    // state) live until the loss is made. It returns the logits and the cache with the loss.
    auto scope = b.module("loss", "ForCausalLMLoss");
    nn::hold(b, {final_hidden});
  }
  for (const Cached& layer : cache) {
    if (layer.key == kNone) continue;
    b.returns(layer.key);
    b.returns(layer.value);
  }
  b.set_loss(loss);
}

}  // namespace

void add_decoder_models(std::vector<ModelSpec>& models) {
  for (const DecoderShape& s : kDecoders) {
    ModelSpec m;
    m.name = s.name;
    m.family = "decoder";
    m.doc = fmt::format(
        "{} by default ({} parameters), laid out as transformers' LlamaForCausalLM, causal LM "
        "loss; --hf-config reads the config.json of any model of the family",
        s.doc, s.params);
    m.input = InputKind::kSequence;
    m.default_seq_len = 2048;
    m.keys = {
        set_key("vocab_size", AttrKind::kInt, s.vocab, "token vocabulary", {}, 1.0),
        set_key("hidden_size", AttrKind::kInt, s.hidden, "model width", {}, 1.0),
        set_key("intermediate_size", AttrKind::kInt, s.intermediate, "MLP width", {}, 1.0),
        count_key("num_hidden_layers", s.layers, "decoder layers"),
        set_key("num_attention_heads", AttrKind::kInt, s.heads, "query heads", {}, 1.0),
        set_key("num_key_value_heads", AttrKind::kInt, s.kv_heads,
                "key/value heads (grouped-query)", {}, 1.0),
        set_key("head_dim", AttrKind::kInt, s.head_dim, "width of a head", {}, 0.0, {},
                s.head_dim == 0 ? "hidden_size / num_attention_heads" : ""),
        set_key("max_position_embeddings", AttrKind::kInt, s.positions, "longest sequence", {},
                1.0),
        set_key("sliding_window", AttrKind::kInt, s.window, "attention window (0: none)", {}, 0.0),
        set_key("rms_norm_eps", AttrKind::kFloat, s.eps, "RMSNorm epsilon", {}, 0.0),
        set_key("rope_theta", AttrKind::kFloat, s.rope_theta, "rotary base (no effect on memory)",
                {}, 0.0),
        set_key("attention_bias", AttrKind::kBool, false, "biases on q, k, v and o projections"),
        set_key("qkv_bias", AttrKind::kBool, s.qkv_bias, "biases on q, k and v only (Qwen2)"),
        set_key("mlp_bias", AttrKind::kBool, false, "biases on the MLP projections"),
        set_key("qk_norm", AttrKind::kBool, s.qk_norm,
                "an RMSNorm over each head of q and of k (Qwen3)"),
        set_key(
            "gemma", AttrKind::kBool, s.gemma,
            "Gemma's embeddings scaled by sqrt(hidden_size) and RMSNorms by (1 + weight) in fp32"),
        set_key("gemma2", AttrKind::kBool, s.gemma2,
                "Gemma 2's layer: four norms, every other layer windowed, soft-capping"),
        set_key("gemma3", AttrKind::kBool, s.gemma3,
                "Gemma 3's layer: Gemma 2's with RMSNorms on q and k, windowed but for every "
                "sliding_window_pattern-th layer, the masks of transformers' masking_utils"),
        set_key("sliding_window_pattern", AttrKind::kInt, int64_t{6},
                "gemma3: every N-th layer attends globally, the others through sliding_window (0: "
                "all windowed)",
                {}, 0.0),
        set_key("attn_logit_softcapping", AttrKind::kFloat, s.gemma2 ? 50.0 : 0.0,
                "cap * tanh(scores / cap) on eager attention's scores (gemma2; 0: none)", {}, 0.0),
        set_key("final_logit_softcapping", AttrKind::kFloat, s.gemma2 ? 30.0 : 0.0,
                "cap * tanh(logits / cap) on the logits (gemma2, gemma3; 0: none)", {}, 0.0),
        set_key("phi3", AttrKind::kBool, s.phi3,
                "Phi-3's fused qkv_proj and gate_up_proj, partial rotary and residual dropout"),
        set_key("partial_rotary_factor", AttrKind::kFloat, 1.0,
                "share of each head that is rotated (phi3)", {}, 0.0, 1.0),
        set_key("resid_pdrop", AttrKind::kFloat, 0.0, "dropout on each residual branch (phi3)", {},
                0.0, 1.0),
        count_key("num_local_experts", s.experts,
                  "experts per layer in place of the MLP (Mixtral; 0: a dense MLP)", 0.0),
        count_key("num_experts_per_tok", 2, "experts each token goes to"),
        set_key("router_jitter_noise", AttrKind::kFloat, 0.0,
                "multiplicative noise on the router's input in training", {}, 0.0, 1.0),
        set_key("tie_word_embeddings", AttrKind::kBool, s.tied, "lm_head shares the embedding"),
        set_key("hidden_act", AttrKind::kString, std::string(s.act), "MLP gate activation",
                {"silu", "gelu_pytorch_tanh", "gelu"}),
        set_key("attention_dropout", AttrKind::kFloat, 0.0, "dropout on attention probabilities",
                {}, 0.0, 1.0),
        set_key("attention", AttrKind::kString, std::string("sdpa"),
                "attention implementation (attn_implementation)",
                {"sdpa", "eager", "flash_attention_2"}),
        set_key("transformers", AttrKind::kString, std::string("5.17"),
                "the transformers release that trains it (4.48 or later): 4.48's loss copies the "
                "shifted logits; SDPA gets k and v unrepeated from 4.54 and q, k and v as they "
                "are from 4.56; from 5.0 from_pretrained loads the config's torch_dtype"),
        set_key("torch_dtype", AttrKind::kString, std::string(s.torch_dtype),
                "config.json's torch_dtype, the dtype the checkpoint is stored in",
                {"float32", "bfloat16", "float16"}),
        set_key("dtype", AttrKind::kString, std::string("auto"),
                "the dtype from_pretrained loads the weights in, which autocast trains them in "
                "(--precision amp-*); auto: torch_dtype from transformers 5.0, float32 before",
                {"auto", "float32", "bfloat16", "float16"}),
        set_key("sdpa_enable_gqa", AttrKind::kString, std::string("auto"),
                "true: SDPA takes k and v at their own heads (enable_gqa=True) when there is no "
                "mask, on PyTorch 2.5+; false: repeated to every query head first (repeat_kv); "
                "auto: as the transformers release calls it (true from 4.54)",
                {"auto", "true", "false"}),
        set_key("sdpa_contiguous", AttrKind::kString, std::string("auto"),
                "q, k and v made contiguous before SDPA (auto: as transformers before 4.56 did)",
                {"auto", "true", "false"}),
        set_key("loss", AttrKind::kString, std::string("cross_entropy"),
                "cross_entropy: lm_head, then transformers' loss over the logits upcast to fp32; "
                "fused_linear_cross_entropy: Liger-Kernel's (0.5.5) lm_head and loss a chunk of "
                "tokens at a time, the logits never whole (no autocast)",
                {"cross_entropy", "fused_linear_cross_entropy"}),
        set_key("input_require_grads", AttrKind::kBool, false,
                "the input embeddings' output requires grad when their weight does not "
                "(enable_input_require_grads): a leaf whose gradient lives to the step's end"),
        set_key("use_cache", AttrKind::kBool, true,
                "the forward returns each layer's key and value (DynamicCache), held to the step's "
                "end"),
    };
    m.build = build_decoder;
    m.options = decoder_options;
    // peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for these model types; it has
    // none for phi3, whose LoraConfig must name target_modules.
    if (!s.phi3) m.lora_target = {"q_proj", "v_proj"};
    m.checkpoint_families = {{"decoder layers", {"model.layers.*"}}};
    // transformers turns the cache off when a decoder trains under gradient checkpointing
    // (use_cache=True is incompatible with it), whatever the config says.
    m.checkpoint_sets = {{"use_cache", "false"}};
    // Reentrant checkpointing gives a layer's parameters gradients only when its input needs
    // one: peft (and transformers, with an adapter loaded) then calls enable_input_require_grads.
    m.reentrant_sets = {{"input_require_grads", "true"}};
    m.settings = [](const ModelConfig& c) {
      std::vector<ModelChange> changes;
      if (c.get_bool("use_cache") && !c.get_bool("gemma2") && !c.get_bool("gemma3")) {
        changes.push_back(
            {"no key/value cache", {{"use_cache", "false"}}, "none (model(..., use_cache=False))"});
      }
      if (c.get_string("loss") == "cross_entropy") {
        changes.push_back({"Liger fused linear cross-entropy",
                           {{"loss", "fused_linear_cross_entropy"}},
                           "needs liger-kernel"});
      }
      if (c.get_string("attention") == "eager") {
        changes.push_back(
            {"SDPA attention", {{"attention", "sdpa"}}, "none (attn_implementation=\"sdpa\")"});
      }
      return changes;
    };
    m.smaller = [](const ModelConfig& c) {
      std::vector<ModelChange> changes;
      if (const int64_t n = c.get_int("num_hidden_layers"); n > 1) {
        changes.push_back({fmt::format("num_hidden_layers {} -> {}", n, n / 2),
                           {{"num_hidden_layers", std::to_string(n / 2)}}});
      }
      return changes;
    };
    models.push_back(std::move(m));
  }
}

}  // namespace trainfit
