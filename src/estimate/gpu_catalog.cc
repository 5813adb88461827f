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

}  // namespace trainfit
