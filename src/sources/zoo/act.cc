// LeRobot's ACT (Action Chunking Transformer) policy in training, as
// lerobot/policies/act/modeling_act.py runs ACTPolicy.forward at v0.6 and later:
//  - each camera image goes through one shared torchvision ResNet trunk (FrozenBatchNorm2d,
//    conv1 ... layer4) on its own, then a 1x1 conv to dim_model;
//  - the encoder tokens are [latent, robot state, env state, every camera's feature pixels],
//    assembled with list() and torch.stack, with fixed 2-D sinusoidal position tables for the
//    pixels and a learned table for the rest;
//  - the VAE encoder (training only) runs [cls, state, chunk_size actions] with a key padding
//    mask and samples the latent by reparameterisation;
//  - post-norm (or pre-norm) encoder and decoder layers built on nn.MultiheadAttention called
//    with need_weights left True, so the attention probabilities are materialised and kept;
//  - the decoder's queries are zeros plus a learned position table, one per chunk step;
//  - the loss is the L1 over non-padded steps (sum / count) plus kl_weight times the KL term.
// From LeRobot 0.4 normalisation runs in the preprocessor before the policy: the inputs here are
// the normalised float32 tensors. With version=0.3 they are the raw batch, which forward
// normalises itself.
#include <fmt/format.h>

#include <algorithm>

#include "sources/zoo/lerobot.h"
#include "sources/zoo/nn.h"
#include "sources/zoo/resnet.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

struct Act {
  int64_t batch = 1;
  std::vector<CameraSize> cameras;
  int64_t state = 0, action = 0, env = 0, chunk = 0, dim = 0, heads = 0, ff = 0;
  int64_t encoder_layers = 0, decoder_layers = 0, latent = 0, vae_layers = 0;
  bool vae = true, pre_norm = false, gelu = false;
  double dropout = 0, kl_weight = 0;
  const ResNetShape* backbone = nullptr;
  bool normalize_in_forward = false;  // LeRobot 0.3: normalize_inputs / normalize_targets
  bool mean_over_all = false;         // up to 0.5: the masked L1 averaged over every element
};

ValueId attention(GraphBuilder& b, std::string_view name, ValueId query, ValueId key, ValueId value,
                  ValueId key_padding_mask, const Act& a) {
  auto scope = b.module(name, "MultiheadAttention");
  std::vector<ValueId> in{query, key, value};
  if (key_padding_mask != kNone) in.push_back(key_padding_mask);
  return b.call1("multi_head_attention", in,
                 {{"embed_dim", a.dim}, {"num_heads", a.heads}, {"dropout", a.dropout}});
}

// linear2(dropout(activation(linear1(x)))), the activation being F.relu or F.gelu.
ValueId feed_forward(GraphBuilder& b, ValueId x, const Act& a) {
  x = nn::linear(b, "linear1", x, a.ff);
  x = a.gelu ? b.call1("gelu", {x}) : b.call1("relu", {x});
  x = nn::dropout(b, "dropout", x, a.dropout);
  return nn::linear(b, "linear2", x, a.dim);
}

// One residual sub-block of an ACT layer: x + dropout(f(x)), with its LayerNorm after the add
// (post-norm, the default) or on f's input (pre-norm), as ACTEncoderLayer and ACTDecoderLayer
// order them.
template <typename F>
ValueId sublayer(GraphBuilder& b, ValueId x, const char* norm, const char* dropout, const Act& a,
                 F&& f) {
  const ValueId in = x;
  const ValueId y = f(a.pre_norm ? nn::layer_norm(b, norm, x) : x);
  x = nn::add(b, x, nn::dropout(b, dropout, y, a.dropout));
  if (!a.pre_norm) x = nn::layer_norm(b, norm, x);
  // f's output is a local of the sub-block (validation/lerobot_reference.py residual) until it
  // returns, and its argument the caller's until it rebinds x to the result.
  b.hold(y);
  b.hold(in);
  return x;
}

ValueId encoder_layer(GraphBuilder& b, ValueId x, ValueId pos, ValueId key_padding_mask,
                      const Act& a) {
  x = sublayer(b, x, "norm1", "dropout1", a, [&](ValueId y) {
    const ValueId qk = nn::add(b, y, pos);
    return attention(b, "self_attn", qk, qk, y, key_padding_mask, a);
  });
  return sublayer(b, x, "norm2", "dropout2", a, [&](ValueId y) { return feed_forward(b, y, a); });
}

ValueId encoder(GraphBuilder& b, std::string_view name, ValueId x, ValueId pos,
                ValueId key_padding_mask, int64_t layers, const Act& a) {
  auto scope = b.module(name, "ACTEncoder");
  {
    auto list = b.module("layers", "ModuleList");
    for (int64_t i = 0; i < layers; ++i) {
      auto layer = b.module(std::to_string(i), "ACTEncoderLayer");
      x = encoder_layer(b, x, pos, key_padding_mask, a);
    }
  }
  if (a.pre_norm) x = nn::layer_norm(b, "norm", x);
  return x;
}

ValueId decoder_layer(GraphBuilder& b, ValueId x, ValueId memory, ValueId query_pos,
                      ValueId memory_pos, const Act& a) {
  x = sublayer(b, x, "norm1", "dropout1", a, [&](ValueId y) {
    const ValueId qk = nn::add(b, y, query_pos);
    return attention(b, "self_attn", qk, qk, y, kNone, a);
  });
  x = sublayer(b, x, "norm2", "dropout2", a, [&](ValueId y) {
    const ValueId query = nn::add(b, y, query_pos);
    const ValueId key = nn::add(b, memory, memory_pos);
    return attention(b, "multihead_attn", query, key, memory, kNone, a);
  });
  return sublayer(b, x, "norm3", "dropout3", a, [&](ValueId y) { return feed_forward(b, y, a); });
}

// einops.repeat(weight, "1 d -> b 1 d"): views of the (1, D) table.
ValueId repeat_over_batch(GraphBuilder& b, ValueId table, int64_t batch) {
  ValueId t = b.call1("reshape", {table}, {{"shape", Dims{-1}}});
  t = b.call1("unsqueeze", {t}, {{"dim", int64_t{0}}});
  t = b.call1("expand", {t}, {{"sizes", Dims{batch, -1}}});
  return b.call1("reshape", {t}, {{"shape", Dims{batch, 1, -1}}});
}

// The VAE encoder's latent sample, z = mu + exp(log_sigma_x2 / 2) * eps, and (mu, log_sigma_x2);
// with the forward's locals that outlive their last use (validation/lerobot_reference.py's
// ActModel.forward keeps each until its name is rebound or the forward returns).
struct Latent {
  ValueId sample = kNone, mu = kNone, log_sigma_x2 = kNone;
  std::vector<ValueId> token_list;  // `tokens`, until the encoder's token list replaces it
  ValueId input = kNone, pos = kNone, never_pad = kNone, key_padding_mask = kNone;
};

Latent vae_latent(GraphBuilder& b, ValueId state, ValueId actions, ValueId action_is_pad,
                  const Act& a) {
  const ValueId cls_table =
      nn::module_parameter(b, "vae_encoder_cls_embed", "Embedding", "weight", {1, a.dim});
  std::vector<ValueId> tokens{repeat_over_batch(b, cls_table, a.batch)};
  if (state != kNone) {
    const ValueId s = nn::linear(b, "vae_encoder_robot_state_input_proj", state, a.dim);
    tokens.push_back(b.call1("unsqueeze", {s}, {{"dim", int64_t{1}}}));
  }
  tokens.push_back(nn::linear(b, "vae_encoder_action_input_proj", actions, a.dim));
  const ValueId input = b.call1("cat", tokens, {{"dim", int64_t{1}}});
  const int64_t len = b.dim(input, 1);
  // vae_encoder_pos_enc.clone().detach(): a copy of the fixed sinusoidal table.
  const ValueId table = b.parameter("vae_encoder_pos_enc", {1, len, a.dim}, /*buffer=*/true);
  const ValueId pos =
      b.call1("to_copy", {table}, {{"dtype", std::string(dtype_name(b.value(table).dtype))}});
  const ValueId never_pad = no_grad_tensor(b, {a.batch, len - a.chunk}, DType::kBool);
  const ValueId key_padding_mask =
      b.call1("cat", {never_pad, action_is_pad}, {{"dim", int64_t{1}}});
  Latent l{.token_list = tokens,
           .input = input,
           .pos = pos,
           .never_pad = never_pad,
           .key_padding_mask = key_padding_mask};
  const Attrs sequence_first{{"dims", Dims{1, 0, 2}}};
  ValueId out =
      encoder(b, "vae_encoder", b.call1("permute", {input}, sequence_first),
              b.call1("permute", {pos}, sequence_first), key_padding_mask, a.vae_layers, a);
  out = b.call1("select", {out}, {{"dim", int64_t{0}}, {"index", int64_t{0}}});
  const ValueId params = nn::linear(b, "vae_encoder_latent_output_proj", out, 2 * a.latent);
  l.mu = b.call1("slice", {params}, {{"dim", int64_t{1}}, {"end", a.latent}});
  l.log_sigma_x2 = b.call1("slice", {params}, {{"dim", int64_t{1}}, {"start", a.latent}});
  const ValueId sigma = b.call1("exp", {b.call1("div_scalar", {l.log_sigma_x2}, {{"value", 2.0}})});
  const ValueId eps =
      b.call1("full", {l.mu}, {{"dtype", std::string(dtype_name(b.value(l.mu).dtype))}});
  l.sample = nn::add(b, l.mu, b.call1("mul", {sigma, eps}));
  return l;
}

// One camera: backbone features, their 1x1 projection and position table as token lists.
// `features` and `pos` are the forward's locals: rebinding `pos` to this camera's table
// releases what it held before (the VAE's copy of its table, for the first camera), and the
// last camera's two stay until the forward returns.
struct CameraLocals {
  ValueId features = kNone, pos = kNone;
};
void camera_tokens(GraphBuilder& b, ValueId image, const Act& a, std::vector<ValueId>& tokens,
                   std::vector<ValueId>& positions, CameraLocals& locals) {
  ValueId features = kNone;
  {
    auto backbone = b.module("backbone", "IntermediateLayerGetter");
    features = resnet_trunk(b, image,
                            {*a.backbone, NormLayer::kFrozenBatchNorm, TrunkNames::kTorchvision});
  }
  if (!b.ok()) return;
  const int64_t h = b.dim(features, 2), w = b.dim(features, 3);
  ValueId pos = kNone;
  {
    auto table = b.module("encoder_cam_feat_pos_embed", "ACTSinusoidalPositionEmbedding2d");
    // Built as (1, h, w, D) and returned permuted to (1, D, h, w).
    pos = b.call1("permute", {no_grad_tensor(b, {1, h, w, a.dim})}, {{"dims", Dims{0, 3, 1, 2}}});
    if (b.value(features).dtype != DType::kFloat32) {
      pos =
          b.call1("to_copy", {pos}, {{"dtype", std::string(dtype_name(b.value(features).dtype))}});
    }
  }
  b.hold(locals.pos);
  features = nn::conv2d(b, "encoder_img_feat_input_proj", features, {.out = a.dim, .kernel = 1});
  // einops.rearrange(t, "b c h w -> (h w) b c"), then list(): one view per pixel.
  const Attrs pixels_first{{"dims", Dims{2, 3, 0, 1}}};
  features = b.call1("reshape", {b.call1("permute", {features}, pixels_first)},
                     {{"shape", Dims{h * w, a.batch, a.dim}}});
  pos = b.call1("reshape", {b.call1("permute", {pos}, pixels_first)},
                {{"shape", Dims{h * w, 1, a.dim}}});
  for (ValueId t : b.call("unbind", {features})) tokens.push_back(t);
  for (ValueId t : b.call("unbind", {pos})) positions.push_back(t);
  locals = {features, pos};
}

ValueId act_loss(GraphBuilder& b, ValueId actions, ValueId predicted, ValueId action_is_pad,
                 const Latent& latent, const Act& a) {
  // abs_err = l1_loss(action, predicted, reduction="none"); masked by ~action_is_pad.
  const ValueId abs_err =
      b.call1("l1_loss", {actions, predicted}, {{"reduction", std::string("none")}});
  const ValueId valid =
      b.call1("logical_not", {b.call1("unsqueeze", {action_is_pad}, {{"dim", int64_t{-1}}})});
  ValueId loss = kNone;
  if (a.mean_over_all) {
    loss = b.call1("mean", {b.call1("mul", {abs_err, valid})});
  } else {
    const ValueId count = b.call1("mul_scalar", {b.call1("sum", {valid})},
                                  {{"value", static_cast<double>(a.action)}});
    const ValueId total = b.call1("sum", {b.call1("mul", {abs_err, valid})});
    loss = b.call1("div", {total, b.call1("clamp_min", {count}, {{"min", 1.0}})});
  }
  if (!a.vae) return loss;
  // mean over the batch of sum over latent dims of -0.5 * (1 + log_sigma_x2 - mu^2 - exp(.))
  ValueId kld = b.call1("add_scalar", {latent.log_sigma_x2}, {{"value", 1.0}});
  kld = b.call1("sub", {kld, b.call1("pow_scalar", {latent.mu}, {{"exponent", 2.0}})});
  kld = b.call1("sub", {kld, b.call1("exp", {latent.log_sigma_x2})});
  kld = b.call1("mul_scalar", {kld}, {{"value", -0.5}});
  kld = b.call1("mean", {b.call1("sum", {kld}, {{"dims", Dims{-1}}})});
  return nn::add(b, loss, b.call1("mul_scalar", {kld}, {{"value", a.kl_weight}}));
}

// The order ACT.__init__ registers its submodules in: model.parameters(), and so the
// optimizer, sees the parameters this way.
std::vector<std::string> registration_order(const Act& a) {
  std::vector<std::string> order;
  auto layers = [&](const std::string& stack, int64_t n, bool decoder) {
    for (int64_t i = 0; i < n; ++i) {
      const std::string p = fmt::format("model.{}.layers.{}.", stack, i);
      order.push_back(p + "self_attn");
      if (decoder) order.push_back(p + "multihead_attn");
      for (const char* m : {"linear1", "linear2", "norm1", "norm2"}) order.push_back(p + m);
      if (decoder) order.push_back(p + "norm3");
    }
    order.push_back(fmt::format("model.{}.norm", stack));
  };
  layers("vae_encoder", a.vae ? a.vae_layers : 0, false);
  for (const char* m : {"vae_encoder_cls_embed", "vae_encoder_robot_state_input_proj",
                        "vae_encoder_action_input_proj", "vae_encoder_latent_output_proj",
                        "vae_encoder_pos_enc", "backbone"}) {
    order.push_back(fmt::format("model.{}", m));
  }
  layers("encoder", a.encoder_layers, false);
  layers("decoder", a.decoder_layers, true);
  for (const char* m : {"encoder_robot_state_input_proj", "encoder_env_state_input_proj",
                        "encoder_latent_input_proj", "encoder_img_feat_input_proj",
                        "encoder_1d_feature_pos_embed", "decoder_pos_embed", "action_head"}) {
    order.push_back(fmt::format("model.{}", m));
  }
  return order;
}

Status read_config(const ModelConfig& c, Act& a) {
  a.batch = c.batch;
  TF_ASSIGN_OR_RETURN(a.cameras, parse_cameras(c.get_string("cameras")));
  a.state = c.get_int("state_dim");
  a.action = c.get_int("action_dim");
  a.env = c.get_int("env_state_dim");
  a.chunk = c.get_int("chunk_size");
  a.dim = c.get_int("dim_model");
  a.heads = c.get_int("n_heads");
  a.ff = c.get_int("dim_feedforward");
  a.encoder_layers = c.get_int("n_encoder_layers");
  a.decoder_layers = c.get_int("n_decoder_layers");
  a.vae = c.get_bool("use_vae");
  a.latent = c.get_int("latent_dim");
  a.vae_layers = c.get_int("n_vae_encoder_layers");
  a.backbone = find_resnet(c.get_string("vision_backbone"));
  a.dropout = c.get_float("dropout");
  a.gelu = c.get_string("feedforward_activation") == "gelu";
  a.pre_norm = c.get_bool("pre_norm");
  a.kl_weight = c.get_float("kl_weight");
  const std::string& version = c.get_string("version");
  a.normalize_in_forward = version == "0.3";
  a.mean_over_all = version != "0.6";
  if (a.cameras.empty() && a.env == 0) {
    return invalid_argument("ACT needs at least one camera or an environment state",
                            "set cameras=640x480 or env_state_dim=N");
  }
  if (a.dim % a.heads != 0 || a.dim % 2 != 0) {
    return invalid_argument(
        fmt::format("dim_model {} must be even and divisible by n_heads {}", a.dim, a.heads));
  }
  return {};
}

void build_act(GraphBuilder& b, const ModelConfig& c) {
  Act a;
  if (Status s = read_config(c, a); !s.ok()) {
    b.fail(s);
    return;
  }
  std::vector<ValueId> images;
  for (size_t i = 0; i < a.cameras.size(); ++i) {
    images.push_back(b.input(fmt::format("observation.images.cam{}", i),
                             {a.batch, 3, a.cameras[i].height, a.cameras[i].width},
                             b.activation_dtype()));
  }
  ValueId state =
      a.state > 0 ? b.input("observation.state", {a.batch, a.state}, b.activation_dtype()) : kNone;
  const ValueId env =
      a.env > 0 ? b.input("observation.environment_state", {a.batch, a.env}, b.activation_dtype())
                : kNone;
  ValueId actions = b.input("action", {a.batch, a.chunk, a.action}, b.activation_dtype());
  const ValueId action_is_pad = b.input("action_is_pad", {a.batch, a.chunk}, DType::kBool);
  b.param_order(registration_order(a));
  b.param_group("model.backbone", 1);

  auto policy = b.module("", "ACTPolicy");
  if (a.normalize_in_forward) {
    // ACTPolicy.forward: normalize_inputs (the state, then each camera; the environment state
    // has no statistics), then normalize_targets; the loop's raw batch stays alive beside them.
    std::vector<NormFeature> inputs;
    if (state != kNone) inputs.push_back({"observation.state", state, {a.state}});
    for (size_t i = 0; i < images.size(); ++i) {
      inputs.push_back({fmt::format("observation.images.cam{}", i), images[i], {3, 1, 1}});
    }
    const std::vector<ValueId> normalized = lerobot_normalize(b, "normalize_inputs", inputs);
    auto next = normalized.begin();
    if (state != kNone) state = *next++;
    std::copy(next, normalized.end(), images.begin());
    const NormFeature action{"action", actions, {a.action}};
    actions = lerobot_normalize(b, "normalize_targets", {action})[0];
    lerobot_unnormalize_stats(b, "unnormalize_outputs", {action});
  }
  ValueId predicted = kNone;
  Latent latent;
  {
    auto model = b.module("model", "ACT");
    if (a.vae) {
      latent = vae_latent(b, state, actions, action_is_pad, a);
    } else {
      latent.sample = no_grad_tensor(b, {a.batch, a.latent}, b.activation_dtype());
    }
    std::vector<ValueId> tokens{nn::linear(b, "encoder_latent_input_proj", latent.sample, a.dim)};
    // The VAE's token list goes as this one replaces it, its last item first.
    for (auto t = latent.token_list.rbegin(); t != latent.token_list.rend(); ++t) b.hold(*t);
    const int64_t n_1d = 1 + (state != kNone ? 1 : 0) + (env != kNone ? 1 : 0);
    const ValueId table_1d = nn::module_parameter(b, "encoder_1d_feature_pos_embed", "Embedding",
                                                  "weight", {n_1d, a.dim});
    std::vector<ValueId> positions =
        b.call("unbind", {b.call1("unsqueeze", {table_1d}, {{"dim", int64_t{1}}})});
    positions.resize(static_cast<size_t>(n_1d));
    if (state != kNone)
      tokens.push_back(nn::linear(b, "encoder_robot_state_input_proj", state, a.dim));
    if (env != kNone) tokens.push_back(nn::linear(b, "encoder_env_state_input_proj", env, a.dim));
    std::vector<int64_t> per_camera;
    CameraLocals camera{kNone, latent.pos};
    for (ValueId image : images) {
      const size_t before = tokens.size();
      camera_tokens(b, image, a, tokens, positions, camera);
      if (!b.ok()) return;
      per_camera.push_back(static_cast<int64_t>(tokens.size() - before));
    }
    const auto seq = static_cast<int64_t>(tokens.size());
    std::string parts = fmt::format("1 latent{}{}", state != kNone ? " + 1 state" : "",
                                    env != kNone ? " + 1 env state" : "");
    for (int64_t n : per_camera) parts += fmt::format(" + {}", n);
    if (!per_camera.empty()) parts += " camera";
    b.fact("encoder_tokens", seq, parts + " tokens");
    if (a.vae) {
      b.fact("vae_encoder_tokens", (state != kNone ? 2 : 1) + a.chunk,
             fmt::format("cls{} + {} actions", state != kNone ? " + state" : "", a.chunk));
    }
    b.fact("decoder_queries", a.chunk, "one per action in the chunk");
    const ValueId encoder_in = b.call1("stack", tokens);
    const ValueId encoder_pos = b.call1("stack", positions);
    const ValueId memory =
        encoder(b, "encoder", encoder_in, encoder_pos, kNone, a.encoder_layers, a);
    const ValueId query_table =
        nn::module_parameter(b, "decoder_pos_embed", "Embedding", "weight", {a.chunk, a.dim});
    const ValueId query_pos = b.call1("unsqueeze", {query_table}, {{"dim", int64_t{1}}});
    const ValueId queries =
        no_grad_tensor(b, {a.chunk, a.batch, a.dim}, b.value(encoder_pos).dtype);
    ValueId x = queries;
    {
      auto decoder = b.module("decoder", "ACTDecoder");
      {
        auto list = b.module("layers", "ModuleList");
        for (int64_t i = 0; i < a.decoder_layers; ++i) {
          auto layer = b.module(std::to_string(i), "ACTDecoderLayer");
          x = decoder_layer(b, x, memory, query_pos, encoder_pos, a);
        }
      }
      x = nn::layer_norm(b, "norm", x);
    }
    const ValueId out = x;
    x = b.call1("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
    predicted = nn::linear(b, "action_head", x, a.action);
    // The forward returns: its locals go in the order Python declared them (vae_in, pos,
    // never_pad, key_padding_mask, positions, features, queries, out).
    for (ValueId local : {latent.input, camera.pos, latent.never_pad, latent.key_padding_mask,
                          encoder_pos, camera.features, queries, out}) {
      b.hold(local);
    }
  }
  b.set_loss(act_loss(b, actions, predicted, action_is_pad, latent, a));
}

}  // namespace

void add_act_models(std::vector<ModelSpec>& models) {
  ModelSpec m;
  m.name = "act";
  m.family = "lerobot";
  m.doc =
      "LeRobot ACT policy (51.6M parameters at 14/14): ResNet trunk per camera, transformer "
      "encoder/decoder, VAE encoder, L1 + KL loss";
  m.input = InputKind::kConfigured;
  m.keys = {
      set_key("cameras", AttrKind::kString, std::string("640x480"),
              "camera images as WxH, comma-separated (each runs the backbone), or none"),
      set_key("state_dim", AttrKind::kInt, int64_t{14}, "robot state size (0: no state token)", {},
              0.0),
      set_key("action_dim", AttrKind::kInt, int64_t{14}, "action size", {}, 1.0),
      set_key("env_state_dim", AttrKind::kInt, int64_t{0}, "environment state size (0: none)", {},
              0.0),
      set_key("chunk_size", AttrKind::kInt, int64_t{100}, "actions predicted per step", {}, 1.0),
      set_key("dim_model", AttrKind::kInt, int64_t{512}, "transformer width", {}, 2.0),
      set_key("n_heads", AttrKind::kInt, int64_t{8}, "attention heads", {}, 1.0),
      set_key("dim_feedforward", AttrKind::kInt, int64_t{3200}, "feed-forward width", {}, 1.0),
      count_key("n_encoder_layers", 4, "encoder layers"),
      count_key("n_decoder_layers", 1, "decoder layers"),
      set_key("use_vae", AttrKind::kBool, true, "train with the VAE encoder and KL loss"),
      set_key("latent_dim", AttrKind::kInt, int64_t{32}, "VAE latent size", {}, 1.0),
      count_key("n_vae_encoder_layers", 4, "VAE encoder layers"),
      set_key("vision_backbone", AttrKind::kString, std::string("resnet18"), "camera backbone",
              {"resnet18", "resnet34", "resnet50"}),
      set_key("dropout", AttrKind::kFloat, 0.1, "transformer dropout", {}, 0.0, 1.0),
      set_key("feedforward_activation", AttrKind::kString, std::string("relu"),
              "feed-forward activation", {"relu", "gelu"}),
      set_key("pre_norm", AttrKind::kBool, false, "pre-norm layers (default post-norm)"),
      set_key("kl_weight", AttrKind::kFloat, 10.0, "weight of the KL term", {}, 0.0),
      lerobot_version_key(
          "0.3 (the loop holds the raw batch on the GPU while forward normalises a copy; the "
          "masked L1 averaged over every element), 0.4 and 0.5 (a preprocessor normalises "
          "first; the same L1), 0.6 and later (the L1 averaged over the unpadded elements)"),
  };
  m.build = build_act;
  m.checkpoint_families = {
      {"backbone stages",
       {"model.backbone.layer1.*", "model.backbone.layer2.*", "model.backbone.layer3.*",
        "model.backbone.layer4.*"}},
      {"encoder layers", {"model.encoder.layers.*"}},
      {"decoder layers", {"model.decoder.layers.*"}},
      {"VAE encoder layers", {"model.vae_encoder.layers.*"}},
  };
  m.backbone = {"model.backbone"};
  m.smaller = [](const ModelConfig& c) {
    std::vector<ModelChange> changes;
    if (const int64_t chunk = c.get_int("chunk_size"); chunk > 1) {
      changes.push_back({fmt::format("chunk_size {} -> {}", chunk, chunk / 2),
                         {{"chunk_size", std::to_string(chunk / 2)}}});
    }
    if (const int64_t ffn = c.get_int("dim_feedforward"); ffn > 1) {
      const int64_t smaller = ffn > 2048 ? 2048 : ffn / 2;
      changes.push_back({fmt::format("dim_feedforward {} -> {}", ffn, smaller),
                         {{"dim_feedforward", std::to_string(smaller)}}});
    }
    if (const int64_t layers = c.get_int("n_encoder_layers"); layers > 1) {
      changes.push_back({fmt::format("n_encoder_layers {} -> {}", layers, layers / 2),
                         {{"n_encoder_layers", std::to_string(layers / 2)}}});
    }
    if (c.get_bool("use_vae"))
      changes.push_back({"use_vae true -> false (no VAE)", {{"use_vae", "false"}}});
    if (std::optional<ModelChange> half = halve_cameras(c)) changes.push_back(*std::move(half));
    return changes;
  };
  m.optimizer = OptimizerPreset{
      OptimizerKind::kAdamW, 1e-4,
      "LeRobot's ACT preset: AdamW, weight_decay 1e-4, backbone in its own parameter group"};
  models.push_back(std::move(m));
}

}  // namespace trainfit
