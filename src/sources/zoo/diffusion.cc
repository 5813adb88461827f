// LeRobot's Diffusion Policy in training, as lerobot/policies/diffusion/modeling_diffusion.py
// runs DiffusionPolicy.forward:
//  - the cameras are stacked into (B, n_obs_steps, n_cams, 3, H, W) (a new tensor);
//  - one RGB encoder per camera (v0.6 and later) or one shared by all: optional crop (a view),
//    the ResNet trunk as nn.Sequential(children[:-2]) with BatchNorm2d or GroupNorm(C/16),
//    SpatialSoftmax keypoints (1x1 conv, softmax over the pixels, expected x/y on a fixed
//    grid), Linear 64 -> 64 and ReLU;
//  - global conditioning: [state, every camera's 64 features, env state] per observation step,
//    flattened;
//  - DDPM noise on the action trajectory at a random timestep (no gradient);
//  - the conditional 1-D UNet: sinusoidal timestep embedding and its MLP, down / mid / up
//    residual blocks with FiLM scale and bias from the conditioning, skip connections;
//  - the loss is the MSE between the predicted and the sampled noise, averaged.
// The inputs are the normalised float32 tensors LeRobot's preprocessor hands the policy (from
// 0.4); with version=0.3 the raw batch, which forward normalises itself.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "sources/zoo/lerobot.h"
#include "sources/zoo/nn.h"
#include "sources/zoo/resnet.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

constexpr int64_t kKeypoints = 32;        // spatial_softmax_num_keypoints
constexpr int64_t kTrainTimesteps = 100;  // num_train_timesteps: DDPM's noise schedule

struct Diffusion {
  int64_t batch = 1;
  std::vector<CameraSize> cameras;
  std::optional<CameraSize> crop;
  int64_t state = 0, action = 0, env = 0, obs_steps = 0, horizon = 0;
  Dims down_dims;
  int64_t kernel = 0, groups = 0, step_embed = 0;
  bool group_norm = false, separate = false;
  const ResNetShape* backbone = nullptr;
  bool normalize_in_forward = false;  // LeRobot 0.3: normalize_inputs / normalize_targets
};

// DiffusionRgbEncoder.forward on (N, 3, H, W): (N, 64) features.
ValueId rgb_encoder(GraphBuilder& b, ValueId images, const Diffusion& d) {
  if (d.crop) {
    // RandomCrop of a tensor is a slice: img[..., top:top + h, left:left + w].
    images = b.call1("slice", {images}, {{"dim", int64_t{2}}, {"end", d.crop->height}});
    images = b.call1("slice", {images}, {{"dim", int64_t{3}}, {"end", d.crop->width}});
  }
  ValueId x = kNone;
  {
    auto backbone = b.module("backbone", "Sequential");
    x = resnet_trunk(b, images,
                     {*d.backbone, d.group_norm ? NormLayer::kGroupNorm : NormLayer::kBatchNorm,
                      TrunkNames::kSequential});
  }
  if (!b.ok()) return kNone;
  const int64_t pixels = b.dim(x, 2) * b.dim(x, 3);
  {
    auto pool = b.module("pool", "SpatialSoftmax");
    x = nn::conv2d(b, "nets", x, {.out = kKeypoints, .kernel = 1});
    x = b.call1("reshape", {x}, {{"shape", Dims{-1, pixels}}});
    const ValueId attention = b.call1("softmax", {x}, {{"dim", int64_t{-1}}});
    const ValueId grid = b.parameter("pos_grid", {pixels, 2}, /*buffer=*/true);
    x = b.call1("matmul", {attention, grid});
    x = b.call1("view", {x}, {{"shape", Dims{-1, kKeypoints, 2}}});
  }
  x = nn::flatten(b, x, 1);
  x = nn::linear(b, "out", x, 2 * kKeypoints);
  return nn::relu(b, "relu", x);
}

// Image features per sample and observation step: (B, n_obs_steps, 64 * n_cams).
ValueId image_features(GraphBuilder& b, ValueId stacked, const Diffusion& d) {
  const int64_t n = static_cast<int64_t>(d.cameras.size());
  const int64_t frames = d.batch * d.obs_steps;
  const CameraSize& cam = d.cameras.front();
  if (!d.separate) {
    // "b s n ... -> (b s n) ...": a view.
    const ValueId flat =
        b.call1("reshape", {stacked}, {{"shape", Dims{frames * n, 3, cam.height, cam.width}}});
    ValueId f = kNone;
    {
      auto encoder = b.module("rgb_encoder", "DiffusionRgbEncoder");
      f = rgb_encoder(b, flat, d);
    }
    return b.call1("reshape", {f}, {{"shape", Dims{d.batch, d.obs_steps, -1}}});
  }
  // "b s n ... -> n (b s) ...", then one encoder per camera on each index of dim 0.
  ValueId per_camera = b.call1("permute", {stacked}, {{"dims", Dims{2, 0, 1, 3, 4, 5}}});
  per_camera =
      b.call1("reshape", {per_camera}, {{"shape", Dims{n, frames, 3, cam.height, cam.width}}});
  const std::vector<ValueId> images = b.call("unbind", {per_camera});
  std::vector<ValueId> features;
  {
    auto list = b.module("rgb_encoder", "ModuleList");
    for (int64_t i = 0; i < n; ++i) {
      auto encoder = b.module(std::to_string(i), "DiffusionRgbEncoder");
      features.push_back(rgb_encoder(b, images[static_cast<size_t>(i)], d));
    }
  }
  // torch.cat, then "(n b s) ... -> b s (n ...)": a copy when there is more than one camera.
  ValueId f = b.call1("cat", features, {{"dim", int64_t{0}}});
  f = b.call1("reshape", {f}, {{"shape", Dims{n, d.batch, d.obs_steps, 2 * kKeypoints}}});
  f = b.call1("permute", {f}, {{"dims", Dims{1, 2, 0, 3}}});
  return b.call1("reshape", {f}, {{"shape", Dims{d.batch, d.obs_steps, n * 2 * kKeypoints}}});
}

// DiffusionConv1dBlock: Conv1d, GroupNorm, Mish as block.0 ... block.2.
ValueId conv_block(GraphBuilder& b, std::string_view name, ValueId x, int64_t out,
                   const Diffusion& d) {
  auto scope = b.module(name, "DiffusionConv1dBlock");
  auto block = b.module("block", "Sequential");
  x = nn::conv1d(b, "0", x, {.out = out, .kernel = d.kernel, .padding = d.kernel / 2});
  x = nn::group_norm(b, "1", x, d.groups);
  return nn::mish(b, "2", x);
}

ValueId residual_block(GraphBuilder& b, std::string_view name, ValueId x, ValueId cond, int64_t out,
                       const Diffusion& d) {
  auto scope = b.module(name, "DiffusionConditionalResidualBlock1d");
  ValueId y = conv_block(b, "conv1", x, out, d);
  ValueId film = kNone;
  {
    auto encoder = b.module("cond_encoder", "Sequential");
    film = nn::linear(b, "1", nn::mish(b, "0", cond), 2 * out);
  }
  film = b.call1("unsqueeze", {film}, {{"dim", int64_t{-1}}});
  const ValueId scale = b.call1("slice", {film}, {{"dim", int64_t{1}}, {"end", out}});
  const ValueId bias = b.call1("slice", {film}, {{"dim", int64_t{1}}, {"start", out}});
  y = nn::add(b, b.call1("mul", {scale, y}), bias);
  y = conv_block(b, "conv2", y, out, d);
  const ValueId residual =
      b.dim(x, 1) == out ? x : nn::conv1d(b, "residual_conv", x, {.out = out, .kernel = 1});
  // out = out + self.residual_conv(x): the product is the expression's, freed by the add; the
  // old out goes when the name is rebound to the sum.
  const ValueId sum = nn::add(b, y, residual);
  b.hold(y);
  return sum;
}

// DiffusionConditionalUnet1d.forward on the noisy (B, T, A) trajectory.
ValueId unet(GraphBuilder& b, ValueId trajectory, ValueId global_cond, const Diffusion& d) {
  auto scope = b.module("unet", "DiffusionConditionalUnet1d");
  ValueId x = b.call1("permute", {trajectory}, {{"dims", Dims{0, 2, 1}}});
  ValueId step = kNone;
  {
    auto encoder = b.module("diffusion_step_encoder", "Sequential");
    {
      // DiffusionSinusoidalPosEmb of the integer timesteps: no gradient.
      auto embedding = b.module("0", "DiffusionSinusoidalPosEmb");
      step = no_grad_tensor(b, {d.batch, d.step_embed});
    }
    step = nn::linear(b, "1", step, d.step_embed * 4);
    step = nn::mish(b, "2", step);
    step = nn::linear(b, "3", step, d.step_embed);
  }
  const ValueId cond = b.call1("cat", {step, global_cond}, {{"dim", int64_t{-1}}});
  std::vector<ValueId> skips;
  {
    auto list = b.module("down_modules", "ModuleList");
    for (size_t i = 0; i < d.down_dims.size(); ++i) {
      auto stage = b.module(std::to_string(i), "ModuleList");
      x = residual_block(b, "0", x, cond, d.down_dims[i], d);
      x = residual_block(b, "1", x, cond, d.down_dims[i], d);
      skips.push_back(x);
      if (i + 1 < d.down_dims.size()) {
        x = nn::conv1d(b, "2", x, {.out = d.down_dims[i], .kernel = 3, .stride = 2, .padding = 1});
      }
    }
  }
  {
    auto list = b.module("mid_modules", "ModuleList");
    x = residual_block(b, "0", x, cond, d.down_dims.back(), d);
    x = residual_block(b, "1", x, cond, d.down_dims.back(), d);
  }
  {
    // Each stage takes the deepest unused skip; the shallowest one is never consumed.
    auto list = b.module("up_modules", "ModuleList");
    for (size_t i = 0; i + 1 < d.down_dims.size(); ++i) {
      auto stage = b.module(std::to_string(i), "ModuleList");
      const int64_t out = d.down_dims[d.down_dims.size() - 2 - i];
      x = b.call1("cat", {x, skips.back()}, {{"dim", int64_t{1}}});
      skips.pop_back();
      x = residual_block(b, "0", x, cond, out, d);
      x = residual_block(b, "1", x, cond, out, d);
      x = nn::conv_transpose1d(b, "2", x, {.out = out, .kernel = 4, .stride = 2, .padding = 1});
    }
  }
  {
    auto final_conv = b.module("final_conv", "Sequential");
    x = conv_block(b, "0", x, d.down_dims.front(), d);
    x = nn::conv1d(b, "1", x, {.out = d.action, .kernel = 1});
  }
  return b.call1("permute", {x}, {{"dims", Dims{0, 2, 1}}});
}

Status read_config(const ModelConfig& c, Diffusion& d) {
  const bool classic = c.get_string("preset") == "classic";
  d.batch = c.batch;
  TF_ASSIGN_OR_RETURN(d.cameras, parse_cameras(c.get_string("cameras")));
  d.state = c.get_int("state_dim");
  d.action = c.get_int("action_dim");
  d.env = c.get_int("env_state_dim");
  d.normalize_in_forward = c.get_string("version") == "0.3";
  d.obs_steps = c.get_int("n_obs_steps");
  d.horizon = c.get_int("horizon");
  if (d.horizon == 0) d.horizon = classic ? 16 : 64;
  TF_ASSIGN_OR_RETURN(d.down_dims, parse_int_list(c.get_string("down_dims")));
  d.kernel = c.get_int("kernel_size");
  d.groups = c.get_int("n_groups");
  d.step_embed = c.get_int("diffusion_step_embed_dim");
  d.backbone = find_resnet(c.get_string("vision_backbone"));
  auto preset_bool = [&](std::string_view key, bool classic_value) {
    const std::string& v = c.get_string(key);
    return v == "preset" ? (classic ? classic_value : !classic_value) : v == "true";
  };
  d.group_norm = preset_bool("use_group_norm", true);
  d.separate = preset_bool("use_separate_rgb_encoder_per_camera", false);
  std::string crop = c.get_string("crop");
  if (crop == "preset") crop = classic ? "84x84" : "none";
  if (crop != "none") {
    TF_ASSIGN_OR_RETURN(std::vector<CameraSize> sizes, parse_cameras(crop));
    if (sizes.size() != 1) {
      return invalid_argument(fmt::format("crop '{}' is not one WxH size", crop),
                              "for example crop=84x84, or crop=none");
    }
    d.crop = sizes.front();
  }
  if (d.cameras.empty() && d.env == 0) {
    return invalid_argument("Diffusion Policy needs at least one camera or an environment state",
                            "set cameras=96x96 or env_state_dim=N");
  }
  for (const CameraSize& cam : d.cameras) {
    if (cam.width != d.cameras.front().width || cam.height != d.cameras.front().height) {
      return invalid_argument("Diffusion Policy needs every camera at the same size",
                              "LeRobot stacks the images; resize them to one WxH");
    }
    if (d.crop && (d.crop->width > cam.width || d.crop->height > cam.height)) {
      return invalid_argument(fmt::format("crop {}x{} is larger than the {}x{} camera images",
                                          d.crop->width, d.crop->height, cam.width, cam.height),
                              "choose a crop no larger than the images, or crop=none");
    }
  }
  // The U-Net halves the horizon at each level: LeRobot asks it to divide by 2^len(down_dims).
  constexpr size_t kMaxLevels = 30;
  if (d.down_dims.size() > kMaxLevels) {
    return invalid_argument(fmt::format("down_dims has {} levels, more than the {} the horizon "
                                        "can be halved through",
                                        d.down_dims.size(), kMaxLevels),
                            "LeRobot's default is down_dims=512,1024,2048");
  }
  const int64_t factor = int64_t{1} << d.down_dims.size();
  if (d.horizon % factor != 0) {
    return invalid_argument(
        fmt::format("horizon {} must be divisible by 2^len(down_dims) = {}", d.horizon, factor),
        fmt::format("for example horizon={}",
                    std::max<int64_t>(factor, d.horizon / factor * factor)));
  }
  for (int64_t dim : d.down_dims) {
    if (dim % d.groups != 0) {
      return invalid_argument(
          fmt::format("down_dims entry {} is not divisible by n_groups {}", dim, d.groups),
          "GroupNorm needs channels divisible by its groups");
    }
  }
  if (d.step_embed < 4 || d.step_embed % 2 != 0) {
    return invalid_argument("diffusion_step_embed_dim must be even and at least 4");
  }
  return {};
}

void build_diffusion(GraphBuilder& b, const ModelConfig& c) {
  Diffusion d;
  if (Status s = read_config(c, d); !s.ok()) {
    b.fail(s);
    return;
  }
  const DType dtype = b.activation_dtype();
  std::vector<ValueId> images;
  for (size_t i = 0; i < d.cameras.size(); ++i) {
    images.push_back(b.input(fmt::format("observation.images.cam{}", i),
                             {d.batch, d.obs_steps, 3, d.cameras[i].height, d.cameras[i].width},
                             dtype));
  }
  ValueId state = b.input("observation.state", {d.batch, d.obs_steps, d.state}, dtype);
  const ValueId env =
      d.env > 0 ? b.input("observation.environment_state", {d.batch, d.obs_steps, d.env}, dtype)
                : kNone;
  ValueId actions = b.input("action", {d.batch, d.horizon, d.action}, dtype);
  b.input("action_is_pad", {d.batch, d.horizon}, DType::kBool);

  auto policy = b.module("", "DiffusionPolicy");
  if (d.normalize_in_forward) {
    // DiffusionPolicy.forward: normalize_inputs (the state to [-1, 1], then each camera by mean
    // and std; the environment state has no statistics), then normalize_targets; the loop's raw
    // batch stays alive beside them.
    std::vector<NormFeature> inputs{{"observation.state", state, {d.state}, /*min_max=*/true}};
    for (size_t i = 0; i < images.size(); ++i) {
      inputs.push_back({fmt::format("observation.images.cam{}", i), images[i], {3, 1, 1}});
    }
    const std::vector<ValueId> normalized = lerobot_normalize(b, "normalize_inputs", inputs);
    state = normalized[0];
    std::copy(normalized.begin() + 1, normalized.end(), images.begin());
    const NormFeature action{"action", actions, {d.action}, /*min_max=*/true};
    actions = lerobot_normalize(b, "normalize_targets", {action})[0];
    lerobot_unnormalize_stats(b, "unnormalize_outputs", {action});
  }
  auto model = b.module("diffusion", "DiffusionModel");
  std::vector<ValueId> cond{state};
  if (!images.empty()) {
    const ValueId stacked = b.call1("stack", images, {{"dim", int64_t{-4}}});
    cond.push_back(image_features(b, stacked, d));
  }
  if (env != kNone) cond.push_back(env);
  const ValueId global_cond = nn::flatten(b, b.call1("cat", cond, {{"dim", int64_t{-1}}}), 1);
  if (!b.ok()) return;
  b.fact("global_cond_dim", b.dim(global_cond, 1),
         fmt::format("{} obs steps x ({} state + {} x 64 image + {} env)", d.obs_steps, d.state,
                     d.cameras.size(), d.env));
  b.fact("unet_cond_dim", b.dim(global_cond, 1) + d.step_embed,
         fmt::format("{} timestep embedding + global conditioning", d.step_embed));
  b.fact("encoder_images", d.batch * d.obs_steps * static_cast<int64_t>(d.cameras.size()),
         fmt::format("batch x {} obs steps x {} cameras through {}", d.obs_steps, d.cameras.size(),
                     d.separate ? "one encoder each" : "a shared encoder"));
  {
    // diffusers' DDPMScheduler keeps alphas_cumprod (num_train_timesteps = 100, fp32) outside
    // the module tree; its add_noise moves the tensor to the batch's device on the first call
    // and keeps it there (`self.alphas_cumprod = self.alphas_cumprod.to(device=...)`).
    auto scheduler = b.module("noise_scheduler", "DDPMScheduler");
    b.parameter("alphas_cumprod", {kTrainTimesteps}, /*buffer=*/true, DType::kFloat32);
  }
  // eps = randn(trajectory.shape); the noisy trajectory from DDPMScheduler.add_noise.
  const ValueId eps = no_grad_tensor(b, b.shape(actions), dtype);
  no_grad_tensor(b, {d.batch}, DType::kInt64);  // timesteps
  const ValueId noisy = no_grad_tensor(b, b.shape(actions), dtype);
  const ValueId predicted = unet(b, noisy, global_cond, d);
  const ValueId loss = b.call1("mse_loss", {predicted, eps}, {{"reduction", std::string("none")}});
  b.set_loss(b.call1("mean", {loss}));
}

}  // namespace

void add_diffusion_models(std::vector<ModelSpec>& models) {
  ModelSpec m;
  m.name = "diffusion";
  m.family = "lerobot";
  m.doc =
      "LeRobot Diffusion Policy (262.7M parameters at 2/2, one camera): ResNet18 RGB encoder "
      "with spatial softmax, conditional 1-D UNet, noise-prediction MSE loss";
  m.input = InputKind::kConfigured;
  const auto key = [](std::string name, AttrKind kind, AttrValue value, std::string doc,
                      std::vector<std::string> choices = {}, std::optional<double> min = {},
                      std::string default_doc = {}) {
    return set_key(std::move(name), kind, std::move(value), std::move(doc), std::move(choices), min,
                   {}, std::move(default_doc));
  };
  const std::vector<std::string> tri = {"preset", "true", "false"};
  m.keys = {
      key("preset", AttrKind::kString, std::string("v0.6"),
          "LeRobot defaults: v0.6 (horizon 64, pretrained BatchNorm ResNet, an encoder per "
          "camera, no crop) or classic (horizon 16, GroupNorm, shared encoder, 84x84 crop)",
          {"v0.6", "classic"}),
      key("cameras", AttrKind::kString, std::string("96x96"),
          "camera images as WxH, comma-separated, all the same size, or none"),
      key("state_dim", AttrKind::kInt, int64_t{2}, "robot state size", {}, 1.0),
      key("action_dim", AttrKind::kInt, int64_t{2}, "action size", {}, 1.0),
      key("env_state_dim", AttrKind::kInt, int64_t{0}, "environment state size (0: none)", {}, 0.0),
      key("n_obs_steps", AttrKind::kInt, int64_t{2}, "observation steps per sample", {}, 1.0),
      // 0 stands for the preset's horizon; a given value must be at least 1.
      key("horizon", AttrKind::kInt, int64_t{0}, "actions denoised per sample", {}, 1.0,
          "64, or 16 with preset=classic"),
      key("down_dims", AttrKind::kString, std::string("512,1024,2048"),
          "UNet channels per stage, comma-separated"),
      key("kernel_size", AttrKind::kInt, int64_t{5}, "UNet convolution kernel", {}, 1.0),
      key("n_groups", AttrKind::kInt, int64_t{8}, "UNet GroupNorm groups", {}, 1.0),
      key("diffusion_step_embed_dim", AttrKind::kInt, int64_t{128}, "timestep embedding size", {},
          4.0),
      key("vision_backbone", AttrKind::kString, std::string("resnet18"), "RGB encoder trunk",
          {"resnet18", "resnet34", "resnet50"}),
      key("crop", AttrKind::kString, std::string("preset"), "random crop WxH, or none", {}, {},
          "none, or 84x84 with preset=classic"),
      key("use_group_norm", AttrKind::kString, std::string("preset"),
          "GroupNorm(C/16) in place of BatchNorm in the RGB encoder", tri, {},
          "false, or true with preset=classic"),
      key("use_separate_rgb_encoder_per_camera", AttrKind::kString, std::string("preset"),
          "one RGB encoder per camera instead of a shared one", tri, {},
          "true, or false with preset=classic"),
      lerobot_version_key(
          "0.3 (the loop holds the raw batch on the GPU while forward normalises a copy), 0.4 "
          "and later (a preprocessor normalises first: 0.4 to 0.6 keep the same tensors); the "
          "defaults are preset's (0.3 to 0.5 shipped classic's, without its crop from 0.4.4)"),
  };
  m.build = build_diffusion;
  m.checkpoint_families = {
      {"RGB encoder stages",
       {"diffusion.rgb_encoder.*.backbone.4.*", "diffusion.rgb_encoder.*.backbone.5.*",
        "diffusion.rgb_encoder.*.backbone.6.*", "diffusion.rgb_encoder.*.backbone.7.*",
        "diffusion.rgb_encoder.backbone.4.*", "diffusion.rgb_encoder.backbone.5.*",
        "diffusion.rgb_encoder.backbone.6.*", "diffusion.rgb_encoder.backbone.7.*"}},
      {"UNet residual blocks",
       {"diffusion.unet.down_modules.*.0", "diffusion.unet.down_modules.*.1",
        "diffusion.unet.mid_modules.*", "diffusion.unet.up_modules.*.0",
        "diffusion.unet.up_modules.*.1"}},
  };
  m.backbone = {"diffusion.rgb_encoder"};
  m.smaller = [](const ModelConfig& c) {
    std::vector<ModelChange> changes;
    Diffusion d;
    if (!read_config(c, d).ok()) return changes;
    if (d.horizon > 1) {
      changes.push_back({fmt::format("horizon {} -> {}", d.horizon, d.horizon / 2),
                         {{"horizon", std::to_string(d.horizon / 2)}}});
    }
    if (std::all_of(d.down_dims.begin(), d.down_dims.end(), [](int64_t w) { return w > 1; })) {
      Dims half;
      for (int64_t w : d.down_dims) half.push_back(w / 2);
      changes.push_back(
          {fmt::format("down_dims {} -> {}", fmt::join(d.down_dims, ","), fmt::join(half, ",")),
           {{"down_dims", fmt::format("{}", fmt::join(half, ","))}}});
    }
    if (std::optional<ModelChange> half = halve_cameras(c)) changes.push_back(*std::move(half));
    return changes;
  };
  m.optimizer = OptimizerPreset{
      OptimizerKind::kAdam, 1e-6,
      "LeRobot's Diffusion preset: Adam (not AdamW), betas (0.95, 0.999), weight_decay 1e-6"};
  models.push_back(std::move(m));
}

}  // namespace trainfit
