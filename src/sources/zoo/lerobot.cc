#include "sources/zoo/lerobot.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "sources/zoo/zoo.h"

namespace trainfit {

Result<std::vector<CameraSize>> parse_cameras(std::string_view text) {
  std::vector<CameraSize> cameras;
  if (text == "none") return cameras;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, end - start);
    Result<Dims> dims = parse_dims(item);
    if (!dims.ok() || dims->size() != 2) {
      return invalid_argument(
          fmt::format("camera '{}' is not WIDTHxHEIGHT", item),
          "list cameras as WxH separated by commas, e.g. cameras=640x480,640x360, or none");
    }
    cameras.push_back({(*dims)[0], (*dims)[1]});
    start = end + 1;
  }
  return cameras;
}

std::optional<ModelChange> halve_cameras(const ModelConfig& config) {
  const std::string& text = config.get_string("cameras");
  Result<std::vector<CameraSize>> cameras = parse_cameras(text);
  if (!cameras.ok() || cameras->empty()) return std::nullopt;
  std::vector<std::string> half;
  for (const CameraSize& c : *cameras) {
    if (c.width < 2 || c.height < 2) return std::nullopt;
    half.push_back(fmt::format("{}x{}", c.width / 2, c.height / 2));
  }
  const std::string value = fmt::format("{}", fmt::join(half, ","));
  return ModelChange{fmt::format("cameras {} -> {}", text, value), {{"cameras", value}}};
}

Result<Dims> parse_int_list(std::string_view text) {
  Dims values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    Result<Dims> one = parse_dims(text.substr(start, end - start));
    if (!one.ok() || one->size() != 1) {
      return invalid_argument(fmt::format("'{}' is not a list of positive integers", text),
                              "separate them with commas, e.g. 512,1024,2048");
    }
    values.push_back(one->front());
    start = end + 1;
  }
  return values;
}

SetKey lerobot_version_key(std::string differences) {
  return set_key("version", AttrKind::kString, std::string("0.6"),
                 "LeRobot release whose training step to follow: " + std::move(differences),
                 kLeRobotVersions);
}

namespace {

// The statistics of one feature, in module buffer_<key>: mean and std, or min and max.
std::pair<ValueId, ValueId> norm_stats(GraphBuilder& b, const NormFeature& f) {
  std::string dict = "buffer_" + f.key;
  std::replace(dict.begin(), dict.end(), '.', '_');
  auto scope = b.module(dict, "ParameterDict");
  const auto stat = [&](const char* name) {
    return b.parameter(name, f.stats, /*buffer=*/false, DType::kFloat32, /*trainable=*/false);
  };
  const ValueId first = stat(f.min_max ? "min" : "mean");
  const ValueId second = stat(f.min_max ? "max" : "std");
  return {first, second};
}

}  // namespace

std::vector<ValueId> lerobot_normalize(GraphBuilder& b, std::string_view name,
                                       const std::vector<NormFeature>& features) {
  auto scope = b.module(name, "Normalize");
  std::vector<ValueId> out;
  out.reserve(features.size());
  for (const NormFeature& f : features) {
    const auto [low, high] = norm_stats(b, f);
    const ValueId centred = b.call1("sub", {f.value, low});
    if (!f.min_max) {
      out.push_back(b.call1("div", {centred, b.call1("add_scalar", {high}, {{"value", 1e-8}})}));
      continue;
    }
    const ValueId range = b.call1("add_scalar", {b.call1("sub", {high, low})}, {{"value", 1e-8}});
    const ValueId unit = b.call1("div", {centred, range});
    out.push_back(b.call1("add_scalar", {b.call1("mul_scalar", {unit}, {{"value", 2.0}})},
                          {{"value", -1.0}}));
  }
  return out;
}

void lerobot_unnormalize_stats(GraphBuilder& b, std::string_view name,
                               const std::vector<NormFeature>& features) {
  auto scope = b.module(name, "Unnormalize");
  for (const NormFeature& f : features) norm_stats(b, f);
}

ValueId no_grad_tensor(GraphBuilder& b, Dims shape, DType dtype) {
  return b.call1("full", {},
                 {{"shape", std::move(shape)}, {"dtype", std::string(dtype_name(dtype))}});
}

}  // namespace trainfit
