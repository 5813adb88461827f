#include "estimate/gpu_catalog.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <string>

namespace trainfit {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

}  // namespace

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> kGpus = {
      {"rtx3060", "NVIDIA GeForce RTX 3060 12GB", 12288 * kMiB, 86},
      {"rtx3090", "NVIDIA GeForce RTX 3090", 24576 * kMiB, 86},
      {"rtx4090", "NVIDIA GeForce RTX 4090", 24564 * kMiB, 89},
      {"rtx5090", "NVIDIA GeForce RTX 5090", 32607 * kMiB, 120},
      {"t4", "Tesla T4", 15360 * kMiB, 75},
      {"a10", "NVIDIA A10", 23028 * kMiB, 86},
      {"l4", "NVIDIA L4", 23034 * kMiB, 89},
      {"v100-16gb", "Tesla V100 16GB", 16384 * kMiB, 70},
      {"v100-32gb", "Tesla V100 32GB", 32768 * kMiB, 70},
      {"a100-40gb", "NVIDIA A100 40GB", 40960 * kMiB, 80},
      {"a100-80gb", "NVIDIA A100 80GB", 81920 * kMiB, 80},
      {"h100-80gb", "NVIDIA H100 80GB HBM3", 81559 * kMiB, 90},
      {"h200", "NVIDIA H200 141GB", 143771 * kMiB, 90},
  };
  return kGpus;
}

Result<GpuSpec> find_gpu(std::string_view name) {
  std::string names;
  for (const GpuSpec& g : gpu_catalog()) {
    if (g.name == name) return g;
    names += names.empty() ? "" : ", ";
    names += g.name;
  }
  return not_found(fmt::format("unknown GPU '{}'", name),
                   fmt::format("known GPUs: {}; or give --gpu-memory 24GiB", names));
}

int64_t cublas_workspace_bytes(int sm) {
  if (sm >= 90) return 32 * kMiB;
  return 4096 * 1024 * 2 + 16 * 1024 * 8;
}

Result<int64_t> parse_bytes(std::string_view text) {
  size_t split = 0;
  while (split < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[split])) || text[split] == '.')) {
    ++split;
  }
  const std::string number(text.substr(0, split));
  const std::string_view unit = text.substr(split);
  double scale = 1;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (unit == "TB")
    scale = 1e12;
  else {
    return parse_error(fmt::format("unknown size unit in '{}'", text),
                       "use B, KiB, MiB, GiB, TiB or KB, MB, GB, TB, e.g. 24GiB");
  }
  char* end = nullptr;
  const double v = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(v) || v <= 0) {
    return parse_error(fmt::format("'{}' is not a size", text), "for example 24GiB or 81920MiB");
  }
  const double bytes = v * scale;
  if (bytes >= 9.2e18) return out_of_range(fmt::format("size '{}' is too large", text));
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace trainfit
