// What LeRobot's policies (act.cc, diffusion.cc) share: camera lists and integer lists given
// as --set values, the no-gradient helper tensors their forward passes compute, and the
// releases (`version`) with the normalisation 0.3 ran inside the policy.
//
//   Result<std::vector<CameraSize>> cams = parse_cameras("640x360,640x480");  // W x H each
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/builder.h"
#include "sources/zoo/zoo.h"

namespace trainfit {

struct CameraSize {
  int64_t width = 0;
  int64_t height = 0;
};

// "640x360,640x480,640x480" (width x height, as cameras are usually named), or "none".
Result<std::vector<CameraSize>> parse_cameras(std::string_view text);
// "512,1024,2048"
Result<Dims> parse_int_list(std::string_view text);

// A tensor computed without gradient from shapes alone (sinusoidal position tables, noise,
// zeros): its memory, in the current module.
ValueId no_grad_tensor(GraphBuilder& b, Dims shape, DType dtype = DType::kFloat32);

// The cameras at half their width and height ("cameras 640x480 -> 320x240"), if any.
std::optional<ModelChange> halve_cameras(const ModelConfig& config);

// The LeRobot releases whose training step keeps different tensors on the GPU: up to 0.3 the
// training loop moves the raw batch to the GPU and holds it for the whole step while the
// policy's forward normalises a copy of it; from 0.4 a preprocessor normalises before the step.
// Up to 0.5 ACT averages its masked L1 over every element; 0.6 over the unpadded ones.
inline const std::vector<std::string> kLeRobotVersions = {"0.3", "0.4", "0.5", "0.6"};
// The `version` key, its help naming what differs between the releases for the model.
SetKey lerobot_version_key(std::string differences);

// A feature the pre-0.4 Normalize and Unnormalize modules (policies/normalize.py) hold
// statistics for: frozen fp32 nn.Parameters in a ParameterDict named buffer_<key, dots as _>,
// (3, 1, 1) for images, the feature's size otherwise.
struct NormFeature {
  std::string key;
  ValueId value = kNone;  // the raw batch tensor (kNone: statistics only)
  Dims stats;
  bool min_max = false;  // MIN_MAX (to [-1, 1]); else MEAN_STD
};
// Normalize.forward under no_grad in module `name`: (x - mean) / (std + 1e-8), or
// (x - min) / (max - min + 1e-8) * 2 - 1; a new tensor per feature, in `features`' order.
std::vector<ValueId> lerobot_normalize(GraphBuilder& b, std::string_view name,
                                       const std::vector<NormFeature>& features);
// Unnormalize's statistics, which training never uses but the policy holds.
void lerobot_unnormalize_stats(GraphBuilder& b, std::string_view name,
                               const std::vector<NormFeature>& features);

}  // namespace trainfit
