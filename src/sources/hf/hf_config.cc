#include "sources/hf/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "base/limits.h"
#include "sources/json_fields.h"

namespace trainfit {
namespace {

using nlohmann::json;

constexpr std::string_view kHint =
    "give the config.json of a Hugging Face model (the file beside its weights); see "
    "examples/*.json";

// What a family's config class fills in when config.json leaves a field out (transformers 4.48).
struct Family {
  std::string_view model_type;
  std::string_view zoo_model;
  int64_t max_positions;
  int64_t head_dim;       // 0: hidden_size / num_attention_heads
  bool qkv_bias;          // biases on q, k and v whatever the config says (Qwen2)
  bool has_bias_fields;   // attention_bias and mlp_bias are read (Llama, Qwen3)
  bool qk_norm;           // RMSNorms on q and k (Qwen3)
  bool sliding_optional;  // use_sliding_window, off by default, is not modelled (Qwen2, Qwen3)
  bool tied;              // tie_word_embeddings' default (Gemma's is true)
  bool gemma;             // scaled embeddings, (1 + weight) norms, and the activation read from
                          // hidden_activation (GELU tanh when null), hidden_act ignored
  bool phi3;              // fused qkv_proj and gate_up_proj, partial_rotary_factor, resid_pdrop
  bool experts;           // num_local_experts experts per layer in place of the MLP (Mixtral)
  bool gemma2;            // four norms a layer, every other layer windowed, soft-capping
  bool gemma3;            // Gemma 2's layer with RMSNorms on q and k, five windowed layers a global
};

// clang-format off
constexpr std::array<Family, 9> kFamilies{{
    {"llama", "llama", 2048, 0, false, true, false, false, false, false, false, false, false, false},
    {"mistral", "mistral", 131072, 0, false, false, false, false, false, false, false, false, false,
     false},
    {"qwen2", "qwen2", 32768, 0, true, false, false, true, false, false, false, false, false, false},
    {"qwen3", "qwen3", 32768, 128, false, true, true, true, false, false, false, false, false, false},
    {"gemma", "gemma", 8192, 256, false, true, false, false, true, true, false, false, false, false},
    {"gemma2", "gemma2", 8192, 256, false, true, false, false, true, true, false, false, true, false},
    {"gemma3_text", "gemma3", 131072, 256, false, true, false, false, true, true, false, false, false,
     true},
    {"phi3", "phi3", 4096, 0, false, false, false, false, false, false, true, false, false, false},
    {"mixtral", "mixtral", 131072, 0, false, false, false, false, false, false, false, true, false,
     false},
}};
// clang-format on

// Sizes are capped so that products of them cannot overflow further on.
constexpr int64_t kMaxSize = int64_t{1} << 32;

std::string number_text(double x) {
  return fmt::format("{}", x);
}
std::string bool_text(bool b) {
  return b ? "true" : "false";
}

// Gemma3TextConfig's layer_types, or when it is missing sliding_window_pattern (6): layer i
// attends globally when (i + 1) % pattern == 0 and through the window otherwise. Returned as that
// pattern (0: every layer windowed); a list that no pattern gives is refused.
Result<int64_t> gemma3_window_pattern(const JsonFields& f, int64_t layers) {
  if (!f.has("layer_types")) {
    TF_ASSIGN_OR_RETURN(const std::optional<int64_t> pattern,
                        f.integer_in_or_null("sliding_window_pattern", 1, kMaxSize));
    return pattern.value_or(6);
  }
  TF_ASSIGN_OR_RETURN(const json* list, f.array("layer_types"));
  if (std::cmp_not_equal(list->size(), layers)) {
    return f.error(fmt::format("'layer_types' has {} entries for {} layers", list->size(), layers));
  }
  std::vector<bool> sliding;
  for (const json& entry : *list) {
    if (!entry.is_string() || (entry != "sliding_attention" && entry != "full_attention")) {
      return f.error("'layer_types' entries must be \"sliding_attention\" or \"full_attention\"");
    }
    sliding.push_back(entry == "sliding_attention");
  }
  const auto first_full = std::find(sliding.begin(), sliding.end(), false);
  const int64_t pattern = first_full == sliding.end() ? 0 : (first_full - sliding.begin()) + 1;
  for (int64_t i = 0; i < layers; ++i) {
    const bool windowed = pattern == 0 || (i + 1) % pattern != 0;
    if (sliding[static_cast<size_t>(i)] != windowed) {
      return f.error(
          "'layer_types' is not a repeating pattern of windowed layers and one full layer; only "
          "such patterns are modelled");
    }
  }
  return pattern;
}

Result<HfModel> parse_document(const json& doc) {
  if (!doc.is_object()) return parse_error("config: must be a JSON object", std::string(kHint));
  const JsonFields f(doc, "config", kHint);
  TF_ASSIGN_OR_RETURN(const std::string model_type, f.string("model_type"));
  if (model_type == "gemma3") {
    return parse_error(
        "config: model_type gemma3 (Gemma3ForConditionalGeneration: a SigLIP vision tower beside "
        "the language model) is not supported yet",
        "its text_config, saved as a config of its own with \"model_type\": \"gemma3_text\", "
        "builds the language model alone (Gemma3ForCausalLM, as the 1B model ships); the vision "
        "tower's weights are then not counted");
  }
  const Family* family = nullptr;
  for (const Family& candidate : kFamilies) {
    if (candidate.model_type == model_type) family = &candidate;
  }
  if (family == nullptr) {
    return parse_error(fmt::format("config: model_type '{}' is not supported yet", model_type),
                       fmt::format("supported: {} (decoders laid out as LlamaForCausalLM)",
                                   fmt::join(hf_model_types(), ", ")));
  }
  HfModel m;
  m.model_type = model_type;
  m.model = std::string(family->zoo_model);
  auto set = [&m](const char* key, std::string value) {
    m.sets.emplace_back(key, std::move(value));
  };

  struct Size {
    const char* key;
    int64_t most;
  };
  for (const Size& size :
       {Size{"vocab_size", kMaxSize}, Size{"hidden_size", kMaxSize},
        Size{"intermediate_size", kMaxSize}, Size{"num_hidden_layers", kMaxRepeats},
        Size{"num_attention_heads", kMaxSize}}) {
    TF_ASSIGN_OR_RETURN(const int64_t n, f.integer_in(size.key, 1, size.most));
    set(size.key, std::to_string(n));
  }
  TF_ASSIGN_OR_RETURN(const int64_t heads, f.integer_in("num_attention_heads", 1, kMaxSize));
  TF_ASSIGN_OR_RETURN(const std::optional<int64_t> kv_heads,
                      f.integer_in_or_null("num_key_value_heads", 1, kMaxSize));
  set("num_key_value_heads", std::to_string(kv_heads.value_or(heads)));
  TF_ASSIGN_OR_RETURN(const std::optional<int64_t> head_dim,
                      f.integer_in_or_null("head_dim", 1, kMaxSize));
  set("head_dim", std::to_string(head_dim.value_or(family->head_dim)));
  TF_ASSIGN_OR_RETURN(const std::optional<int64_t> positions,
                      f.integer_in_or_null("max_position_embeddings", 1, kMaxSize));
  set("max_position_embeddings", std::to_string(positions.value_or(family->max_positions)));

  TF_ASSIGN_OR_RETURN(const std::optional<double> eps, f.number_or_null("rms_norm_eps", 0, 1));
  set("rms_norm_eps", number_text(eps.value_or(1e-6)));
  TF_ASSIGN_OR_RETURN(const std::optional<double> theta, f.number_or_null("rope_theta", 0, 1e300));
  set("rope_theta", number_text(theta.value_or(10000.0)));
  TF_ASSIGN_OR_RETURN(const std::optional<double> dropout,
                      f.number_or_null("attention_dropout", 0, 1));
  set("attention_dropout", number_text(dropout.value_or(0.0)));

  bool attention_bias = false;
  bool mlp_bias = false;
  if (family->has_bias_fields) {
    TF_ASSIGN_OR_RETURN(attention_bias, f.boolean_or("attention_bias", false));
    TF_ASSIGN_OR_RETURN(mlp_bias, f.boolean_or("mlp_bias", false));
  }
  set("attention_bias", bool_text(attention_bias));
  set("qkv_bias", bool_text(family->qkv_bias));
  set("mlp_bias", bool_text(mlp_bias));
  set("qk_norm", bool_text(family->qk_norm));
  set("gemma", bool_text(family->gemma));
  set("gemma2", bool_text(family->gemma2));
  set("gemma3", bool_text(family->gemma3));
  set("phi3", bool_text(family->phi3));
  // Gemma2Config: soft-caps of 50 on attention scores and 30 on logits when the fields are
  // missing, none when null. Gemma3TextConfig: the logits' none unless given; Gemma3Attention
  // never passes attn_logit_softcapping to the attention, so that one is not read.
  auto softcap = [&](const char* key, double missing) -> Result<double> {
    if (!doc.contains(key)) return missing;
    TF_ASSIGN_OR_RETURN(const std::optional<double> cap, f.number_or_null(key, 0, 1e300));
    return cap.value_or(0.0);
  };
  double attn_softcap = 0.0;
  double final_softcap = 0.0;
  if (family->gemma2) {
    TF_ASSIGN_OR_RETURN(attn_softcap, softcap("attn_logit_softcapping", 50.0));
    TF_ASSIGN_OR_RETURN(final_softcap, softcap("final_logit_softcapping", 30.0));
  } else if (family->gemma3) {
    TF_ASSIGN_OR_RETURN(final_softcap, softcap("final_logit_softcapping", 0.0));
  }
  set("attn_logit_softcapping", number_text(attn_softcap));
  set("final_logit_softcapping", number_text(final_softcap));
  // Phi3Config: rotary over the first partial_rotary_factor of each head (Phi-4-mini: 0.75), and
  // dropout on each residual branch.
  double rotary_factor = 1.0;
  double resid_dropout = 0.0;
  if (family->phi3) {
    TF_ASSIGN_OR_RETURN(const std::optional<double> factor,
                        f.number_or_null("partial_rotary_factor", 0, 1));
    rotary_factor = factor.value_or(1.0);
    TF_ASSIGN_OR_RETURN(const std::optional<double> pdrop, f.number_or_null("resid_pdrop", 0, 1));
    resid_dropout = pdrop.value_or(0.0);
  }
  // MixtralConfig: eight experts, two per token; output_router_logits adds the load-balancing
  // loss over every layer's router logits, which is not modelled.
  int64_t experts = 0;
  int64_t per_token = 2;
  double jitter = 0.0;
  if (family->experts) {
    TF_ASSIGN_OR_RETURN(const std::optional<int64_t> n,
                        f.integer_in_or_null("num_local_experts", 1, kMaxRepeats));
    experts = n.value_or(8);
    TF_ASSIGN_OR_RETURN(const std::optional<int64_t> k,
                        f.integer_in_or_null("num_experts_per_tok", 1, kMaxRepeats));
    per_token = k.value_or(2);
    TF_ASSIGN_OR_RETURN(const std::optional<double> noise,
                        f.number_or_null("router_jitter_noise", 0, 1));
    jitter = noise.value_or(0.0);
    TF_ASSIGN_OR_RETURN(const bool aux, f.boolean_or("output_router_logits", false));
    if (aux) {
      return f.error(
          "output_router_logits true (the router's load-balancing loss) is not modelled yet");
    }
  }
  set("num_local_experts", std::to_string(experts));
  set("num_experts_per_tok", std::to_string(per_token));
  set("router_jitter_noise", number_text(jitter));
  set("partial_rotary_factor", number_text(rotary_factor));
  set("resid_pdrop", number_text(resid_dropout));
  TF_ASSIGN_OR_RETURN(const bool tied, f.boolean_or("tie_word_embeddings", family->tied));
  set("tie_word_embeddings", bool_text(tied));
  TF_ASSIGN_OR_RETURN(const bool use_cache, f.boolean_or("use_cache", true));
  set("use_cache", bool_text(use_cache));

  // GemmaMLP takes hidden_activation, GELU tanh when it is null, and ignores hidden_act.
  const char* act_field = family->gemma ? "hidden_activation" : "hidden_act";
  std::string act = family->gemma ? "gelu_pytorch_tanh" : "silu";
  if (f.has(act_field)) {
    TF_ASSIGN_OR_RETURN(act, f.string(act_field));
  }
  const bool act_ok = family->gemma ? (act == "gelu_pytorch_tanh" || act == "gelu") : act == "silu";
  if (!act_ok) {
    return f.error(fmt::format("{} '{}' is not supported for model_type {} ({})", act_field, act,
                               model_type,
                               family->gemma ? "gelu_pytorch_tanh or gelu are" : "silu is"));
  }
  set("hidden_act", act);

  // The dtype the checkpoint is stored in, which from_pretrained(dtype="auto") loads: torch_dtype,
  // or dtype as configs saved by transformers 4.56 and later name it; none means float32.
  std::string stored = "float32";
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!f.has(key)) continue;
    TF_ASSIGN_OR_RETURN(stored, f.string(key));
    if (stored != "float32" && stored != "bfloat16" && stored != "float16") {
      return f.error(
          fmt::format("{} '{}' is not a weight dtype trainfit knows (float32, "
                      "bfloat16 or float16)",
                      key, stored));
    }
  }
  set("torch_dtype", stored);

  // Mistral's attention window (MistralConfig's 4096 when the field is missing, none when null),
  // Phi-3's and Mixtral's (none unless given); Gemma 2's every other layer (4096 when missing;
  // its layers cannot be built without one); Qwen2 and Qwen3 attend over the whole sequence
  // unless use_sliding_window, not modelled.
  int64_t window = 0;
  int64_t pattern = 6;
  if (family->gemma3) {
    TF_ASSIGN_OR_RETURN(const int64_t layers, f.integer_in("num_hidden_layers", 1, kMaxRepeats));
    TF_ASSIGN_OR_RETURN(pattern, gemma3_window_pattern(f, layers));
    TF_ASSIGN_OR_RETURN(const bool bidirectional,
                        f.boolean_or("use_bidirectional_attention", false));
    if (bidirectional) return f.error("use_bidirectional_attention true is not modelled yet");
  }
  if (family->gemma2 || family->gemma3) {
    window = 4096;
    if (doc.contains("sliding_window")) {
      TF_ASSIGN_OR_RETURN(window, f.integer_in("sliding_window", 1, kMaxSize));
    }
  } else if (model_type == "mistral" || family->phi3 || family->experts) {
    if (f.has("sliding_window")) {
      TF_ASSIGN_OR_RETURN(window, f.integer_in("sliding_window", 1, kMaxSize));
    } else if (!doc.contains("sliding_window") && model_type == "mistral") {
      window = 4096;
    }
  } else if (family->sliding_optional) {
    TF_ASSIGN_OR_RETURN(const bool sliding, f.boolean_or("use_sliding_window", false));
    if (sliding) return f.error("use_sliding_window true is not modelled yet");
  }
  set("sliding_window", std::to_string(window));
  set("sliding_window_pattern", std::to_string(pattern));
  return m;
}

}  // namespace

std::vector<std::string_view> hf_model_types() {
  std::vector<std::string_view> out;
  out.reserve(kFamilies.size());
  for (const Family& f : kFamilies) out.push_back(f.model_type);
  return out;
}

Result<HfModel> parse_hf_config(std::string_view text, std::string_view source) {
  TF_ASSIGN_OR_RETURN(const json doc, parse_json_file(text, source, kHint));
  Result<HfModel> m = parse_document(doc);
  if (!m.ok()) return m.status().with_context(std::string(source));
  return m;
}

}  // namespace trainfit
