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
  d.target.sm = d.sm;
  d.target.sm_count = gpu ? gpu->peaks.sm_count : 108;  // no GPU given: an A100
  d.context_bytes = kDefaultCudaContextBytes;
  if (gpu && gpu->measured_context_bytes > 0) {
    d.context_bytes = gpu->measured_context_bytes;
    d.context_source = ContextSource::kMeasured;
  }
  d.cublas_workspace_bytes = cublas_workspace_bytes(d.sm);
  return d;
}

}  // namespace trainfit
