// GPUs trainfit knows: memory, architecture (which decides cuBLAS workspace sizes and the
// attention kernels) and an estimate of the CUDA context.
//
//   const GpuSpec* gpu = find_gpu("rtx4090");
//   gpu->total_bytes, gpu->sm, cublas_workspace_bytes(gpu->sm)
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "graph/device_rules.h"

namespace trainfit {

struct GpuSpec {
  std::string_view name;     // what --gpu takes
  std::string_view display;  // what nvidia-smi calls it
  int64_t total_bytes = 0;   // total memory as nvidia-smi reports it
  int sm = 80;               // compute capability, e.g. 89 for 8.9
};

const std::vector<GpuSpec>& gpu_catalog();
Result<GpuSpec> find_gpu(std::string_view name);

// Memory the CUDA context, loaded kernels and library handles take outside PyTorch's allocator:
// an estimate (300-400 MB of context with lazy loading, pytorch/pytorch#107667 and #109888,
// plus cuBLAS and cuDNN handles), not a measurement; --cuda-context overrides it.
inline constexpr int64_t kDefaultCudaContextBytes = int64_t{500} << 20;

}  // namespace trainfit
