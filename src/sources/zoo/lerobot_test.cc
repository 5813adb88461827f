// LeRobot's ACT and Diffusion Policy: parameter counts against LeRobot's, the facts users ask
// about, the optimizer preset's parameter groups and order, and bad --set values.
#include <gtest/gtest.h>

#include "base/size_math.h"
#include "graph/activations.h"
#include "graph/blocks.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

using Sets = std::vector<std::pair<std::string, std::string>>;

Result<Graph> build(const std::string& name, Sets sets, int64_t batch = 1) {
  ModelRequest r;
  r.name = name;
  r.sets = std::move(sets);
  r.batch = batch;
  return build_model(r);
}

int64_t parameters(const std::string& name, Sets sets) {
  const Result<Graph> g = build(name, std::move(sets));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return -1;
  return block_figures(*g).parameters;
}

const GraphFact* fact(const Graph& g, std::string_view key) {
  for (const GraphFact& f : g.facts) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

Dims input_shape(const Graph& g, std::string_view name) {
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (g.input_names[i] == name) return g.value(g.inputs[i]).shape;
  }
  return {};
}

constexpr const char* kThreeCameras = "640x360,640x480,640x480";

// LeRobot's training logs print 51,613,582 (14/14) and 51,597,190 (6/6); one backbone serves
// every camera, so the camera count does not change it.
TEST(Act, ParameterCountsMatchLeRobot) {
  EXPECT_EQ(parameters("act", {}), 51'613'582);
  EXPECT_EQ(parameters("act", {{"cameras", kThreeCameras}}), 51'613'582);
  EXPECT_EQ(parameters("act", {{"state_dim", "6"}, {"action_dim", "6"}}), 51'597'190);
  // The closed form: use_vae=false drops the VAE encoder and its projections (17,381,440);
  // resnet34's trunk has 10,100,736 more conv weights than resnet18's.
  EXPECT_EQ(parameters("act", {{"use_vae", "false"}}), 51'613'582 - 17'381'440);
  EXPECT_EQ(parameters("act", {{"vision_backbone", "resnet34"}}), 61'714'318);
  // An environment state adds its projection (E * 512 + 512) and one 1-D position (512).
  EXPECT_EQ(parameters("act", {{"env_state_dim", "10"}}), 51'613'582 + 10 * 512 + 1024);
}

TEST(Act, ThreeCamerasGive842EncoderTokens) {
  const Result<Graph> g = build("act", {{"cameras", kThreeCameras}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const GraphFact* s = fact(*g, "encoder_tokens");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, 842);  // 1 latent + 1 state + 12*20 + 15*20 + 15*20
  EXPECT_NE(s->text.find("240 + 300 + 300"), std::string::npos) << s->text;
}

TEST(Act, BackboneIsItsOwnParameterGroupInRegistrationOrder) {
  const Result<Graph> g = build("act", {});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  // ACT.__init__ registers the VAE encoder first; model.parameters() starts there.
  EXPECT_EQ(g->params.front().name, "model.vae_encoder.layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(g->params.back().name, "model.action_head.bias");
  for (const Param& p : g->params) {
    EXPECT_EQ(p.group, p.name.starts_with("model.backbone.") ? 1 : 0) << p.name;
  }
}

// Each post-norm attention keeps, per head and score, the fp32 softmax output, the 1-byte
// CUDA dropout mask and the fp32 dropped probabilities: 9 bytes per element.
TEST(Act, AttentionMatricesFollowTheSequenceLengths) {
  const Result<Graph> g = build("act", {});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const int64_t s = 302, vae = 102, chunk = 100, heads = 8, bytes = 9;
  const int64_t expected = heads * bytes * (4 * s * s + 4 * vae * vae + chunk * chunk + chunk * s);
  EXPECT_EQ(block_figures(*g).attention_bytes, expected);
  // Under AMP the softmax output stays fp32 (autocast's fp32 list) and the second bmm keeps a
  // bf16 copy of the dropped probabilities: 4 + 1 + 2 bytes.
  ModelRequest amp;
  amp.name = "act";
  amp.options.precision = Precision::kAmpBf16;
  const Result<Graph> a = build_model(amp);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(block_figures(*a).attention_bytes, expected / bytes * 7);
}

// LeRobot logs 262,709,026 for PushT (2/2, one 96x96 camera); the UNet's closed form gives the
// others. Neither horizon nor crop nor image size changes the count.
TEST(Diffusion, ParameterCountsMatchLeRobot) {
  EXPECT_EQ(parameters("diffusion", {}), 262'709'026);
  EXPECT_EQ(parameters("diffusion", {{"preset", "classic"}}), 262'709'026);
  EXPECT_EQ(parameters("diffusion", {{"cameras", "640x480"}, {"horizon", "16"}}), 262'709'026);
  const Sets three = {{"state_dim", "14"}, {"action_dim", "14"}, {"cameras", "96x96,96x96,96x96"}};
  EXPECT_EQ(parameters("diffusion", three), 293'174'382);
  Sets shared = three;
  shared.emplace_back("use_separate_rgb_encoder_per_camera", "false");
  EXPECT_EQ(parameters("diffusion", shared), 270'780'206);
}

TEST(Diffusion, PresetsSetHorizonAndConditioning) {
  const Result<Graph> v06 = build("diffusion", {});
  const Result<Graph> classic = build("diffusion", {{"preset", "classic"}});
  ASSERT_TRUE(v06.ok() && classic.ok());
  EXPECT_EQ(input_shape(*v06, "action"), (Dims{1, 64, 2}));  // horizon 64
  EXPECT_EQ(input_shape(*classic, "action"), (Dims{1, 16, 2}));
  // 2 obs steps x (2 state + 64 image features), plus the 128-wide timestep embedding.
  EXPECT_EQ(fact(*v06, "global_cond_dim")->value, 132);
  EXPECT_EQ(fact(*v06, "unet_cond_dim")->value, 260);
  EXPECT_EQ(block_figures(*v06).attention_bytes, 0);
}

// diffusers' DDPMScheduler is not a module, but add_noise moves its alphas_cumprod (100 fp32
// values) to the batch's device and keeps it there: state beside the parameters, not one of them.
// LeRobot 0.4.4 measured on the CPU (validation/check_real_lerobot.py) counts its 400 bytes.
TEST(Diffusion, KeepsTheSchedulersAlphasCumprod) {
  const Result<Graph> g = build("diffusion", {});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  int found = 0;
  for (const Param& p : g->params) {
    if (p.name != "diffusion.noise_scheduler.alphas_cumprod") continue;
    ++found;
    EXPECT_TRUE(p.buffer);
    EXPECT_EQ(g->value(p.value).shape, (Dims{100}));
    EXPECT_EQ(g->value(p.value).dtype, DType::kFloat32);
  }
  EXPECT_EQ(found, 1);
  EXPECT_EQ(block_figures(*g).parameters, 262'709'026);
}

// LeRobot 0.3 normalises inside the policy's forward, and the training loop holds the raw batch:
// the normalised copies are new tensors the model keeps (the images by the backbone's first
// convolution, the state and action by their projections). Seed 000's three cameras at batch 8:
// 8 x 3 x (360 x 640 + 2 x 480 x 640) x 4 bytes of images, 8 x 14 x 4 of state and
// 8 x 100 x 14 x 4 of action more than 0.5, where a preprocessor normalised them first. The
// statistics are frozen parameters: mean and std of the state (14 each), of each camera (3 each)
// and of the action, twice (normalize_targets, unnormalize_outputs). 0.6 averages the masked L1
// over the unpadded elements only, which keeps 8 bytes more (the count's temporaries).
TEST(Act, Version03KeepsTheNormalisedCopies) {
  const Sets three = {{"cameras", kThreeCameras}};
  const auto kept = [&](const char* version) {
    Sets sets = three;
    sets.emplace_back("version", version);
    const Result<Graph> g = build("act", sets, 8);
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    return g.ok() ? activation_bytes(*g) : -1;
  };
  EXPECT_EQ(kept("0.3") - kept("0.5"), int64_t{8} * 3 * (360 * 640 + 2 * 480 * 640) * 4 +
                                           int64_t{8} * 14 * 4 + int64_t{8} * 100 * 14 * 4);
  EXPECT_EQ(kept("0.4"), kept("0.5"));
  EXPECT_EQ(kept("0.6") - kept("0.5"), 8);
  EXPECT_EQ(parameters("act", {{"cameras", kThreeCameras}, {"version", "0.3"}}),
            51'613'582 + 2 * 14 + 3 * 2 * 3 + 2 * 2 * 14);
  // Diffusion: the state's and action's min and max (2 each), the camera's mean and std.
  EXPECT_EQ(parameters("diffusion", {{"version", "0.3"}}), 262'709'026 + 2 * 2 + 2 * 3 + 2 * 2 * 2);
}

TEST(LeRobot, BadSetValuesAreClearErrors) {
  struct Bad {
    const char* model;
    Sets sets;
    const char* says;
  };
  const std::string levels_31 = [] {
    std::string dims = "64";
    for (int i = 0; i < 30; ++i) dims += ",64";
    return dims;
  }();
  const Bad cases[] = {
      {"act", {{"cameras", "640x"}}, "not WIDTHxHEIGHT"},
      {"act", {{"cameras", "axb"}}, "not WIDTHxHEIGHT"},
      {"act", {{"cameras", ""}}, "not WIDTHxHEIGHT"},
      {"act", {{"cameras", "640x480,"}}, "not WIDTHxHEIGHT"},
      {"act", {{"cameras", "0x480"}}, "not WIDTHxHEIGHT"},
      {"act", {{"cameras", "none"}}, "at least one camera"},
      {"act", {{"n_heads", "7"}}, "divisible by n_heads"},
      {"act", {{"vision_backbone", "vgg16"}}, "not one of"},
      {"diffusion", {{"horizon", "60"}}, "divisible by 2^len(down_dims)"},
      {"diffusion", {{"horizon", "0"}}, "default 64, or 16 with preset=classic"},
      {"diffusion", {{"cameras", "96x96,640x480"}}, "same size"},
      {"diffusion", {{"crop", "120x120"}}, "larger than"},
      {"diffusion", {{"crop", "84"}}, "not"},
      {"diffusion", {{"down_dims", "512,,1024"}}, "not a list"},
      {"diffusion", {{"down_dims", "100,200"}}, "n_groups"},
      {"diffusion", {{"down_dims", levels_31}}, "31 levels"},
      {"act", {{"n_vae_encoder_layers", "99999999999"}}, "at most 10000"},
      {"diffusion", {{"state_dim", "0"}}, "at least 1"},
      {"act", {{"version", "0.2"}}, "not one of 0.3, 0.4, 0.5, 0.6"},
      {"diffusion", {{"version", "1.0"}}, "not one of 0.3, 0.4, 0.5, 0.6"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.sets.front().first + "=" + c.sets.front().second);
    const Result<Graph> g = build(c.model, c.sets);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().to_string().find(c.says), std::string::npos) << g.status().to_string();
  }
  ModelRequest r;
  r.name = "act";
  r.input = Dims{3, 224, 224};
  EXPECT_FALSE(build_model(r).ok());
}

}  // namespace
}  // namespace trainfit
