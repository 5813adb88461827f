#include "estimate/device.h"

namespace trainfit {

DeviceProfile cpu_profile() {
  DeviceProfile d;
  d.target = {Device::kCpu, TorchVersion::k1_13};
  d.caching_allocator = false;
  return d;
}

DeviceProfile cuda_profile(const std::optional<GpuSpec>& gpu) {
  DeviceProfile d;
  d.target = {Device::kCuda, TorchVersion::k2};
  if (gpu) {
    d.gpu = std::string(gpu->name);
    d.gpu_display = std::string(gpu->display);
    d.total_bytes = gpu->total_bytes;
    d.sm = gpu->sm;
    d.timing = catalog_timing(*gpu);
  }
  d.context_bytes = kDefaultCudaContextBytes;
  d.cublas_workspace_bytes = cublas_workspace_bytes(d.sm);
  return d;
}

}  // namespace trainfit
