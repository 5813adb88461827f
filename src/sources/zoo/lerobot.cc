#include "sources/zoo/lerobot.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

ValueId no_grad_tensor(GraphBuilder& b, Dims shape, DType dtype) {
  return b.call1("full", {},
                 {{"shape", std::move(shape)}, {"dtype", std::string(dtype_name(dtype))}});
}

}  // namespace trainfit
