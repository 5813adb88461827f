#include "sources/zoo/zoo.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/size_math.h"
#include "graph/activations.h"

namespace trainfit {
namespace {

int64_t parameters(const Graph& g) {
  int64_t n = 0;
  for (const Param& p : g.params) {
    if (!p.buffer) n += checked_numel(g.value(p.value).shape).value_or(0);
  }
  return n;
}

Result<Graph> build(const std::string& name,
                    std::vector<std::pair<std::string, std::string>> sets = {},
                    std::optional<Dims> input = {}, std::optional<int64_t> seq = {},
                    int64_t batch = 2) {
  ModelRequest r;
  r.name = name;
  r.sets = std::move(sets);
  r.input = std::move(input);
  r.seq_len = seq;
  r.batch = batch;
  return build_model(r);
}

TEST(Zoo, EveryModelBuildsUnderBothProfiles) {
  for (const ModelSpec& m : model_zoo()) {
    for (Device d : {Device::kCuda, Device::kCpu}) {
      SCOPED_TRACE(m.name);
      ModelRequest r;
      r.name = m.name;
      r.batch = 2;
      if (m.input == InputKind::kSequence) r.seq_len = 128;
      r.options.target = {d, d == Device::kCpu ? TorchVersion::k1_13 : TorchVersion::k2};
      const Result<Graph> g = build_model(r);
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      EXPECT_GT(activation_bytes(*g), 0);
      EXPECT_NE(g->loss, kNone);
    }
  }
}

TEST(Zoo, Gpt2MatchesThePublishedParameterCounts) {
  EXPECT_EQ(parameters(*build("gpt2", {}, {}, 16)), 124'439'808);
  EXPECT_EQ(parameters(*build("gpt2-medium", {}, {}, 16)), 354'823'168);
  EXPECT_EQ(parameters(*build("gpt2-large", {}, {}, 16)), 774'030'080);
}

// The published parameter counts of each decoder's reference model (its config.json figures are
// the zoo's defaults), and Llama 3.2 1B (tied embeddings, 16 layers) through --set keys.
TEST(Zoo, DecodersMatchThePublishedParameterCounts) {
  EXPECT_EQ(parameters(*build("llama", {}, {}, 16)), 8'030'261'248);
  EXPECT_EQ(parameters(*build("mistral", {}, {}, 16)), 7'241'732'096);
  EXPECT_EQ(parameters(*build("qwen2", {}, {}, 16)), 7'615'616'512);
  EXPECT_EQ(parameters(*build("qwen3", {}, {}, 16)), 8'190'735'360);
  EXPECT_EQ(parameters(*build("gemma", {}, {}, 16)), 8'537'680'896);
  EXPECT_EQ(parameters(*build("phi3", {}, {}, 16)), 3'821'079'552);
  EXPECT_EQ(parameters(*build("mixtral", {}, {}, 16)), 46'702'792'704);
  EXPECT_EQ(parameters(*build("gemma2", {}, {}, 16)), 9'241'705'984);
  EXPECT_EQ(parameters(*build("gemma3", {}, {}, 16)), 999'885'952);
  // Gemma 2 2B: the same layout, narrower and shallower.
  EXPECT_EQ(parameters(*build("gemma2",
                              {{"hidden_size", "2304"},
                               {"intermediate_size", "9216"},
                               {"num_hidden_layers", "26"},
                               {"num_attention_heads", "8"},
                               {"num_key_value_heads", "4"}},
                              {}, 16)),
            2'614'341'888);
  EXPECT_EQ(parameters(*build("llama",
                              {{"hidden_size", "2048"},
                               {"intermediate_size", "8192"},
                               {"num_hidden_layers", "16"},
                               {"tie_word_embeddings", "true"}},
                              {}, 16)),
            1'235'814'400);
}

TEST(Zoo, DecoderShapesThatDoNotDivideAreRefused) {
  struct Refused {
    const char* model;
    const char* key;
    const char* value;
    const char* message;
  };
  const Refused cases[] = {
      {"llama", "num_key_value_heads", "5", "num_key_value_heads 5"},
      {"llama", "hidden_size", "4100", "not divisible by num_attention_heads"},
      {"llama", "max_position_embeddings", "8", "exceeds max_position_embeddings 8"},
      // A token goes to between one and all of the experts.
      {"mixtral", "num_experts_per_tok", "9", "num_experts_per_tok 9"},
      // Only Phi-3 rotates part of a head, and the rotated part must be pairs.
      {"llama", "partial_rotary_factor", "0.5", "needs phi3=true"},
      {"phi3", "partial_rotary_factor", "0.7", "rotary width 67"},
      // Soft-capping is Gemma 2's and 3's, and Gemma 2's layer is Gemma's.
      {"llama", "final_logit_softcapping", "30", "needs gemma2=true or gemma3=true"},
      {"gemma2", "gemma", "false", "gemma2 needs gemma=true"},
      // Gemma 3 caps only its logits, has its own q and k norms, and windows its layers.
      {"gemma3", "attn_logit_softcapping", "50", "attn_logit_softcapping needs gemma2=true"},
      {"gemma3", "qk_norm", "true", "gemma3 needs gemma=true, gemma2=false"},
      {"gemma3", "sliding_window", "0", "gemma3 needs a sliding_window"},
  };
  for (const Refused& c : cases) {
    SCOPED_TRACE(fmt::format("{} {}={}", c.model, c.key, c.value));
    const Result<Graph> g = build(c.model, {{c.key, c.value}}, {}, 16);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find(c.message), std::string::npos) << g.status().to_string();
  }
  EXPECT_TRUE(build("gemma3", {{"final_logit_softcapping", "30"}}, {}, 16).ok());
}

TEST(Zoo, SetKeysChangeTheModel) {
  EXPECT_EQ(parameters(*build("resnet18", {{"num_classes", "10"}})), 11'689'512 - 990 * 513);
  EXPECT_EQ(parameters(*build("gpt2", {{"n_layer", "2"}}, {}, 16)), 124'439'808 - 10 * 7'087'872);
}

TEST(Zoo, UnknownModelSuggestsTheClosestName) {
  const Status s = build("resnet5").status();
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_NE(s.to_string().find("did you mean 'resnet50'"), std::string::npos) << s.to_string();
}

TEST(Zoo, UnknownSetKeyListsTheValidOnes) {
  const Status s = build("resnet50", {{"num_class", "10"}}).status();
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_NE(s.to_string().find("did you mean 'num_classes'"), std::string::npos) << s.to_string();
}

TEST(Zoo, BadSetValuesAreRejected) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"num_classes", "abc"},
                                                        {"num_classes", "0"},
                                                        {"num_classes", "12x"},
                                                        {"num_classes", "99999999999999999999999"},
                                                        {"dropout", "2"},
                                                        {"dropout", "nan"}}) {
    const Status s = build("vgg16", {{key, value}}).status();
    EXPECT_FALSE(s.ok()) << key << "=" << value;
    EXPECT_NE(s.message().find(key), std::string::npos) << s.to_string();
    EXPECT_FALSE(s.hint().empty());
  }
  EXPECT_FALSE(build("gpt2", {{"attention", "flash"}}, {}, 16).ok());
}

TEST(Zoo, ImpossibleInputsAreClearErrors) {
  const Status small = build("vgg16", {}, Dims{3, 16, 16}).status();
  EXPECT_EQ(small.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(small.message().find("too small"), std::string::npos) << small.to_string();
  EXPECT_NE(small.message().find("features."), std::string::npos) << small.to_string();

  const Status patch = build("vit_b_16", {}, Dims{3, 225, 225}).status();
  EXPECT_NE(patch.message().find("multiple of 16"), std::string::npos) << patch.to_string();
  EXPECT_FALSE(build("vit_b_16", {}, Dims{3, 224, 256}).ok());
  EXPECT_FALSE(build("resnet18", {}, Dims{224, 224}).ok());
  EXPECT_FALSE(build("resnet18", {}, {}, 128).ok());        // --seq-len for an image model
  EXPECT_FALSE(build("gpt2", {}, Dims{3, 224, 224}).ok());  // --input for a sequence model
  EXPECT_FALSE(build("gpt2", {}, {}, 2048).ok());           // longer than n_positions
  EXPECT_FALSE(build("resnet18", {}, {}, {}, 0).ok());      // batch 0
  const Status huge = build("resnet18", {}, {}, {}, int64_t{1} << 50).status();
  EXPECT_EQ(huge.code(), ErrorCode::kOutOfRange) << huge.to_string();
}

TEST(Zoo, ParseDimsRejectsGarbage) {
  EXPECT_EQ(*parse_dims("3x224x224"), (Dims{3, 224, 224}));
  for (const char* bad : {"", "x", "3x", "x3", "3xx4", "-1x2", "0x4", "3x224x224x", "3*224", "a",
                          "99999999999999999999x1", "3 x 4", "3x\xff"}) {
    EXPECT_FALSE(parse_dims(bad).ok()) << bad;
  }
}

TEST(Zoo, Torch113FallsBackToEagerAttentionForGpt2) {
  ModelRequest r;
  r.name = "gpt2";
  r.seq_len = 16;
  r.sets = {{"n_layer", "1"}};
  r.options.target = {Device::kCpu, TorchVersion::k1_13};
  const Graph g = *build_model(r);
  bool sdpa = false;
  for (const Node& n : g.nodes) sdpa |= n.op->name.rfind("sdpa", 0) == 0;
  EXPECT_FALSE(sdpa);
  r.options.target = {Device::kCuda, TorchVersion::k2};
  const Graph cuda = *build_model(r);
  sdpa = false;
  for (const Node& n : cuda.nodes) sdpa |= n.op->name.rfind("sdpa", 0) == 0;
  EXPECT_TRUE(sdpa);
}

}  // namespace
}  // namespace trainfit
