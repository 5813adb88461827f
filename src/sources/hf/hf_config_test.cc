#include "sources/hf/hf_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "base/size_math.h"
#include "sources/parser_fuzz_test_util.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

std::string example(const std::string& name) {
  std::ifstream in(std::string(TRAINFIT_TEST_DATA_DIR) + "/../../examples/" + name);
  EXPECT_TRUE(in) << name;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int64_t parameters(const HfModel& m) {
  ModelRequest r;
  r.name = m.model;
  r.sets = m.sets;
  r.batch = 1;
  r.seq_len = 16;
  const Result<Graph> g = build_model(r);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return -1;
  int64_t n = 0;
  for (const Param& p : g->params) {
    if (!p.buffer) n += checked_numel(g->value(p.value).shape).value_or(0);
  }
  return n;
}

// The shipped configs (the published config.json files) build the published parameter counts.
TEST(HfConfig, ShippedConfigsBuildThePublishedParameterCounts) {
  const std::pair<const char*, int64_t> cases[] = {
      {"llama-3-8b.json", 8'030'261'248},         {"llama-3.2-1b.json", 1'235'814'400},
      {"mistral-7b-v0.1.json", 7'241'732'096},    {"qwen2.5-7b.json", 7'615'616'512},
      {"qwen3-8b.json", 8'190'735'360},           {"gemma-7b.json", 8'537'680'896},
      {"gemma-2b.json", 2'506'172'416},           {"phi-3-mini-4k-instruct.json", 3'821'079'552},
      {"mixtral-8x7b-v0.1.json", 46'702'792'704}, {"gemma-2-9b.json", 9'241'705'984},
      {"gemma-3-1b.json", 999'885'952},
  };
  for (const auto& [file, count] : cases) {
    SCOPED_TRACE(file);
    const Result<HfModel> m = parse_hf_config(example(file), file);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(parameters(*m), count);
  }
}

TEST(HfConfig, FieldsBecomeSetKeys) {
  const Result<HfModel> m = parse_hf_config(example("qwen2.5-7b.json"), "qwen");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->model_type, "qwen2");
  EXPECT_EQ(m->model, "qwen2");
  auto value = [&](const std::string& key) {
    for (const auto& [k, v] : m->sets) {
      if (k == key) return v;
    }
    return std::string("(none)");
  };
  EXPECT_EQ(value("num_key_value_heads"), "4");
  EXPECT_EQ(value("qkv_bias"), "true");
  EXPECT_EQ(value("rms_norm_eps"), "1e-06");
  EXPECT_EQ(value("sliding_window"), "0");  // use_sliding_window is false
  EXPECT_EQ(value("head_dim"), "0");        // hidden_size / num_attention_heads
}

using Sets = std::vector<std::pair<std::string, std::string>>;

// A small config of `model_type` that leaves the optional fields out, with `extra` fields.
Result<HfModel> small_config(std::string_view model_type, std::string_view extra = "") {
  return parse_hf_config(fmt::format(R"({{"model_type": "{}", "vocab_size": 100, "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4{}}})",
                                     model_type, extra),
                         "small");
}

void expect_sets(const Result<HfModel>& m, const Sets& expected) {
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  for (const auto& pair : expected) {
    EXPECT_NE(std::find(m->sets.begin(), m->sets.end(), pair), m->sets.end()) << pair.first;
  }
}

// Qwen3: RMSNorms on q and k, and Qwen3Config's head_dim of 128 when the file has none.
TEST(HfConfig, Qwen3NormsQAndKAndDefaultsTheHeadWidth) {
  expect_sets(
      small_config("qwen3"),
      {{"qk_norm", "true"}, {"head_dim", "128"}, {"qkv_bias", "false"}, {"sliding_window", "0"}});
  EXPECT_FALSE(small_config("qwen3", R"(, "use_sliding_window": true)").ok());
}

// Gemma: GELU tanh from hidden_activation (hidden_act is ignored; null means GELU tanh), tied
// embeddings and a head of 256 unless the file says otherwise.
TEST(HfConfig, GemmaReadsHiddenActivationAndTiesEmbeddings) {
  expect_sets(small_config("gemma", R"(, "hidden_act": "gelu", "hidden_activation": null)"),
              {{"gemma", "true"},
               {"hidden_act", "gelu_pytorch_tanh"},
               {"tie_word_embeddings", "true"},
               {"head_dim", "256"}});
  expect_sets(small_config("gemma", R"(, "hidden_activation": "gelu")"), {{"hidden_act", "gelu"}});
  expect_sets(small_config("llama"), {{"gemma", "false"}, {"tie_word_embeddings", "false"}});
  const Result<HfModel> relu = small_config("gemma", R"(, "hidden_activation": "relu")");
  ASSERT_FALSE(relu.ok());
  EXPECT_NE(relu.status().message().find("hidden_activation 'relu' is not supported"),
            std::string::npos);
}

// Phi-3: fused projections, its window (none unless given), partial rotary and residual dropout.
TEST(HfConfig, Phi3ReadsItsWindowRotaryShareAndResidualDropout) {
  expect_sets(small_config("phi3"), {{"phi3", "true"},
                                     {"sliding_window", "0"},
                                     {"partial_rotary_factor", "1"},
                                     {"resid_pdrop", "0"},
                                     {"qkv_bias", "false"}});
  expect_sets(
      small_config("phi3", R"(, "sliding_window": 2047, "partial_rotary_factor": 0.75,
          "resid_pdrop": 0.1)"),
      {{"sliding_window", "2047"}, {"partial_rotary_factor", "0.75"}, {"resid_pdrop", "0.1"}});
  expect_sets(small_config("llama", R"(, "partial_rotary_factor": 0.5)"),
              {{"phi3", "false"}, {"partial_rotary_factor", "1"}});
  EXPECT_FALSE(small_config("phi3", R"(, "partial_rotary_factor": 2)").ok());
  EXPECT_FALSE(small_config("phi3", R"(, "resid_pdrop": "0.1")").ok());
}

// Mixtral: MixtralConfig's eight experts, two per token, no window unless given; the
// load-balancing loss (output_router_logits) is refused.
TEST(HfConfig, MixtralReadsItsExpertsAndRefusesTheAuxiliaryLoss) {
  expect_sets(small_config("mixtral"), {{"num_local_experts", "8"},
                                        {"num_experts_per_tok", "2"},
                                        {"router_jitter_noise", "0"},
                                        {"sliding_window", "0"},
                                        {"max_position_embeddings", "131072"}});
  expect_sets(small_config("mixtral", R"(, "num_local_experts": 4, "num_experts_per_tok": 1,
          "router_jitter_noise": 0.01, "sliding_window": 4096)"),
              {{"num_local_experts", "4"},
               {"num_experts_per_tok", "1"},
               {"router_jitter_noise", "0.01"},
               {"sliding_window", "4096"}});
  expect_sets(small_config("llama", R"(, "num_local_experts": 8)"), {{"num_local_experts", "0"}});
  const Result<HfModel> aux = small_config("mixtral", R"(, "output_router_logits": true)");
  ASSERT_FALSE(aux.ok());
  EXPECT_NE(aux.status().message().find("output_router_logits"), std::string::npos);
  EXPECT_FALSE(small_config("mixtral", R"(, "num_local_experts": 0)").ok());
}

// Gemma 2: Gemma's norms and activation, four norms a layer, Gemma2Config's soft-caps (50 on
// attention scores, 30 on logits) and window (4096) when the fields are missing; a null cap is
// none; a null window is refused (transformers cannot build the windowed layers without one).
TEST(HfConfig, Gemma2ReadsItsSoftCapsAndWindow) {
  expect_sets(small_config("gemma2"), {{"gemma", "true"},
                                       {"gemma2", "true"},
                                       {"attn_logit_softcapping", "50"},
                                       {"final_logit_softcapping", "30"},
                                       {"sliding_window", "4096"},
                                       {"hidden_act", "gelu_pytorch_tanh"},
                                       {"tie_word_embeddings", "true"}});
  expect_sets(small_config("gemma2", R"(, "attn_logit_softcapping": null,
          "final_logit_softcapping": 20.0, "sliding_window": 512)"),
              {{"attn_logit_softcapping", "0"},
               {"final_logit_softcapping", "20"},
               {"sliding_window", "512"}});
  expect_sets(small_config("gemma", R"(, "final_logit_softcapping": 30.0)"),
              {{"gemma2", "false"}, {"final_logit_softcapping", "0"}});
  const Result<HfModel> no_window = small_config("gemma2", R"(, "sliding_window": null)");
  ASSERT_FALSE(no_window.ok());
  EXPECT_NE(no_window.status().message().find("'sliding_window'"), std::string::npos)
      << no_window.status().to_string();
  const Result<HfModel> text_cap = small_config("gemma2", R"(, "final_logit_softcapping": "30")");
  ASSERT_FALSE(text_cap.ok());
  EXPECT_NE(text_cap.status().message().find("'final_logit_softcapping'"), std::string::npos)
      << text_cap.status().to_string();
}

// Gemma 3 (gemma3_text): Gemma's norms and activation, Gemma3TextConfig's window (4096) and
// pattern (a global layer every sixth) when the fields are missing, no soft-cap unless the logits'
// is given (the attention's is never applied); layer_types, when given, is read as its pattern.
TEST(HfConfig, Gemma3ReadsItsWindowPatternAndLayerTypes) {
  expect_sets(small_config("gemma3_text"), {{"gemma", "true"},
                                            {"gemma3", "true"},
                                            {"gemma2", "false"},
                                            {"attn_logit_softcapping", "0"},
                                            {"final_logit_softcapping", "0"},
                                            {"sliding_window", "4096"},
                                            {"sliding_window_pattern", "6"},
                                            {"head_dim", "256"},
                                            {"max_position_embeddings", "131072"},
                                            {"tie_word_embeddings", "true"}});
  expect_sets(small_config("gemma3_text", R"(, "attn_logit_softcapping": 50.0,
          "final_logit_softcapping": 30.0, "sliding_window": 512, "sliding_window_pattern": 2)"),
              {{"attn_logit_softcapping", "0"},
               {"final_logit_softcapping", "30"},
               {"sliding_window", "512"},
               {"sliding_window_pattern", "2"}});
  expect_sets(
      small_config("gemma3_text", R"(, "layer_types": ["sliding_attention", "full_attention"])"),
      {{"sliding_window_pattern", "2"}});
  expect_sets(
      small_config("gemma3_text", R"(, "layer_types": ["sliding_attention", "sliding_attention"])"),
      {{"sliding_window_pattern", "0"}});
  expect_sets(
      small_config("gemma3_text", R"(, "layer_types": ["full_attention", "full_attention"])"),
      {{"sliding_window_pattern", "1"}});
  const std::pair<const char*, const char*> refused[] = {
      {R"(, "layer_types": ["full_attention", "sliding_attention"])", "not a repeating pattern"},
      {R"(, "layer_types": ["full_attention"])", "'layer_types' has 1 entries for 2 layers"},
      {R"(, "layer_types": ["chunked_attention", "full_attention"])",
       "entries must be \"sliding_attention\" or \"full_attention\""},
      {R"(, "layer_types": "full_attention")", "'layer_types' must be a list"},
      {R"(, "sliding_window": null)", "'sliding_window'"},
      {R"(, "sliding_window_pattern": 0)", "'sliding_window_pattern' must be"},
      {R"(, "use_bidirectional_attention": true)", "use_bidirectional_attention true"},
  };
  for (const auto& [extra, message] : refused) {
    SCOPED_TRACE(extra);
    const Result<HfModel> m = small_config("gemma3_text", extra);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().to_string().find(message), std::string::npos) << m.status().to_string();
  }
}

// The dtype the checkpoint is stored in: torch_dtype, or dtype as transformers 4.56 and later save
// it; a config without either loads in float32.
TEST(HfConfig, ReadsTheStoredDtype) {
  expect_sets(small_config("llama", R"(, "torch_dtype": "bfloat16")"),
              {{"torch_dtype", "bfloat16"}});
  expect_sets(small_config("llama", R"(, "dtype": "float16")"), {{"torch_dtype", "float16"}});
  expect_sets(small_config("llama"), {{"torch_dtype", "float32"}});
}

// A config that leaves fields out gets its family's defaults, as transformers' config class does.
TEST(HfConfig, MissingOptionalFieldsTakeTheFamilyDefaults) {
  expect_sets(small_config("mistral"), {{"num_key_value_heads", "4"},
                                        {"max_position_embeddings", "131072"},
                                        {"sliding_window", "4096"},
                                        {"tie_word_embeddings", "false"},
                                        {"use_cache", "true"},
                                        {"rms_norm_eps", "1e-06"},
                                        {"qk_norm", "false"}});
}

Status status_of(std::string_view text) {
  return parse_hf_config(text, "config.json").status();
}

TEST(HfConfig, BadConfigsGetOneLineNamingTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "must be a JSON object"},
      {"{}", "'model_type' is missing"},
      {R"({"model_type": "gemma9"})", "model_type 'gemma9' is not supported yet"},
      {R"({"model_type": "gemma4"})", "model_type 'gemma4' is not supported yet"},
      {R"({"model_type": "gemma3", "text_config": {}})",
       "model_type gemma3 (Gemma3ForConditionalGeneration: a SigLIP vision tower"},
      {R"({"model_type": "llama", "hidden_size": 64})", "'vocab_size' is missing"},
      {R"({"model_type": "llama", "vocab_size": "32000"})", "'vocab_size' must be an integer"},
      {R"({"model_type": "llama", "vocab_size": 0})", "'vocab_size' must be at least 1"},
      {R"({"model_type": "llama", "vocab_size": 1e30})", "'vocab_size' must be an integer"},
      {R"({"model_type": "llama", "vocab_size": 99999999999999999999})",
       "'vocab_size' must be an integer"},
      {R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 4294967296, "num_attention_heads": 2})",
       "'num_hidden_layers' must be at most 10000, got 4294967296"},
      {R"({"model_type": "mixtral", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_local_experts": 65536})",
       "'num_local_experts' must be at most 10000"},
      {R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 1, "num_attention_heads": 2, "tie_word_embeddings": "yes"})",
       "'tie_word_embeddings' must be true or false"},
      {R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_act": "relu"})",
       "hidden_act 'relu' is not supported"},
      {R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_act": 3})",
       "'hidden_act' must be a string"},
      {R"({"model_type": "qwen2", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 1, "num_attention_heads": 2, "use_sliding_window": true})",
       "use_sliding_window true is not modelled yet"},
      {R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 1, "num_attention_heads": 2, "torch_dtype": "float8_e4m3fn"})",
       "torch_dtype 'float8_e4m3fn' is not a weight dtype"},
      {R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 1, "num_attention_heads": 2, "dtype": 16})",
       "'dtype' must be a string"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    const Status s = status_of(text);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.to_string().find(message), std::string::npos) << s.to_string();
    EXPECT_EQ(s.to_string().find('\n'), std::string::npos);
  }
}

// Head counts that do not divide parse (they are numbers) and are refused when the model builds.
TEST(HfConfig, HeadsThatDoNotDivideAreRefusedByTheModel) {
  const Result<HfModel> m = parse_hf_config(
      R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 64, "intermediate_size": 8,
          "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 3})",
      "odd");
  ASSERT_TRUE(m.ok());
  ModelRequest r;
  r.name = m->model;
  r.sets = m->sets;
  r.seq_len = 16;
  const Result<Graph> g = build_model(r);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("not divisible by num_key_value_heads 3"), std::string::npos);
}

TEST(HfConfig, TruncatedAndGarbledConfigsAreRefusedInOneLine) {
  const int refused = fuzz_parser(
      example("llama-3.2-1b.json"), 5,
      [](std::string_view t) { return parse_hf_config(t, "fuzzed.json"); },
      [](const HfModel& m) { EXPECT_EQ(m.model, "llama"); });
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace trainfit
