#include "graph/device_rules.h"

namespace trainfit {
namespace {

bool cuda(const KernelTarget& target) {
  return target.device == Device::kCuda;
}

}  // namespace

int64_t cublas_workspace_bytes(int sm) {
  constexpr int64_t kKiB = 1024;
  constexpr int64_t kMiB = 1024 * kKiB;
  if (sm >= 90) return 32 * kMiB;
  return 4096 * kKiB * 2 + 16 * kKiB * 8;
}

bool aten_op_uses_cublas(std::string_view aten_name) {
  // aten names after decomposition.
  static constexpr std::string_view kGemms[] = {
      "aten::mm",     "aten::addmm",  "aten::bmm",   "aten::baddbmm", "aten::addbmm",
      "aten::matmul", "aten::linear", "aten::addmv", "aten::mv",      "aten::_addmm_activation"};
  for (std::string_view g : kGemms) {
    if (g == aten_name) return true;
  }
  return false;
}

bool CublasHandles::creates_handle(const KernelTarget& target, bool autograd_thread) {
  if (!cuda(target)) return false;
  bool& made = autograd_thread ? backward_ : forward_;
  const bool first = !made;
  made = true;
  return first;
}

bool keeps_dropout_mask(const KernelTarget& target, bool inplace, double p, int64_t elements) {
  return cuda(target) && !inplace && p > 0 && p < 1 && elements > 0;
}

int64_t dropout_kept_bytes(const KernelTarget& target, int64_t noise_bytes, int64_t itemsize) {
  if (!cuda(target) || itemsize <= 0) return noise_bytes;
  return noise_bytes / itemsize * dtype_bytes(DType::kBool);
}

bool adds_gradient_in_place(const KernelTarget& target, bool only_reference) {
  return target.torch == TorchVersion::k2 && only_reference;
}

bool host_tensors_use_device_memory(const KernelTarget& target) {
  return !cuda(target);
}

bool kernels_take_workspaces(const KernelTarget& target) {
  return cuda(target);
}

bool uses_grad_scaler(const KernelTarget& target, Precision precision) {
  return cuda(target) && precision == Precision::kAmpFp16;
}

bool recompute_stops_early(const KernelTarget& target) {
  return target.torch == TorchVersion::k2;
}

}  // namespace trainfit
