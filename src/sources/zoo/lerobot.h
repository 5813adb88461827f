// What LeRobot's policies (act.cc, diffusion.cc) share: camera lists and integer lists given
// as --set values, and the no-gradient helper tensors their forward passes compute.
//
//   Result<std::vector<CameraSize>> cams = parse_cameras("640x360,640x480");  // W x H each
#pragma once

#include <optional>
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

}  // namespace trainfit
