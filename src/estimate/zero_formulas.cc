#include "estimate/zero_formulas.h"

#include <algorithm>

namespace trainfit {
namespace {

constexpr double kBufferFactor = 1.5;  // DeepSpeed's additional_buffer_factor default

}  // namespace

double zero_paper_bytes(double params, ZeroStage stage, int ranks, double k) {
  const double n = std::max(1, ranks);
  switch (stage) {
    case ZeroStage::kNone:
      return (4 + k) * params;
    case ZeroStage::kOs:
      return 4 * params + k * params / n;
    case ZeroStage::kOsGrad:
      return 2 * params + (2 + k) * params / n;
    case ZeroStage::kOsGradParams:
      return (4 + k) * params / n;
  }
  return 0;
}

DeepSpeedEstimate deepspeed_zero2(const DeepSpeedSetup& s, bool legacy) {
  const double total_gpus = std::max(1, s.nodes) * std::max(1, s.gpus);
  const double p = s.params;
  DeepSpeedEstimate e;
  if (s.offload_optimizer) {
    e.gpu_bytes = static_cast<int64_t>(2 * p);
    e.cpu_bytes = static_cast<int64_t>(p * std::max(4.0 * total_gpus, 16.0) * kBufferFactor);
  } else {
    e.gpu_bytes = legacy ? static_cast<int64_t>(4 * p) + static_cast<int64_t>(16 * p / total_gpus)
                         : static_cast<int64_t>(2 * p) + static_cast<int64_t>(18 * p / total_gpus);
    e.cpu_bytes = static_cast<int64_t>(p * 4 * s.gpus * kBufferFactor);
  }
  return e;
}

DeepSpeedEstimate deepspeed_zero3(const DeepSpeedSetup& s) {
  const double total_gpus = std::max(1, s.nodes) * std::max(1, s.gpus);
  const double gpus_factor = 1.0 / std::max(1, s.nodes);
  const double p = s.params;
  const auto largest = static_cast<int64_t>(4 * s.largest_layer_params);
  const double n_gpus = s.gpus;
  DeepSpeedEstimate e;
  if (s.offload_optimizer && s.offload_params) {
    e.gpu_bytes = largest;
    e.cpu_bytes = static_cast<int64_t>(
        p * (s.zero_init ? 18 * gpus_factor : std::max(4 * n_gpus, 18 * gpus_factor)) *
        kBufferFactor);
  } else if (s.offload_optimizer) {
    e.gpu_bytes = largest + static_cast<int64_t>(2 * p / total_gpus);
    e.cpu_bytes = static_cast<int64_t>(
        p * (s.zero_init ? 16 * gpus_factor : std::max(4 * n_gpus, 16 * gpus_factor)) *
        kBufferFactor);
  } else {
    e.gpu_bytes = largest + static_cast<int64_t>(18 * p / total_gpus);
    e.cpu_bytes = static_cast<int64_t>((s.zero_init ? s.largest_layer_params : p) * 4 * n_gpus *
                                       kBufferFactor);
  }
  return e;
}

}  // namespace trainfit
