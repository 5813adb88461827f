#include "graph/device_rules.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

constexpr KernelTarget kCuda{Device::kCuda, TorchVersion::k2};
constexpr KernelTarget kCpu{Device::kCpu, TorchVersion::k1_13};

TEST(DeviceRules, CublasWorkspaceByArchitecture) {
  EXPECT_EQ(cublas_workspace_bytes(80), 8'519'680);  // 4096 KiB x 2 + 16 KiB x 8
  EXPECT_EQ(cublas_workspace_bytes(89), 8'519'680);
  EXPECT_EQ(cublas_workspace_bytes(90), 32 << 20);
}

TEST(DeviceRules, OneCublasHandlePerThreadOnCudaOnly) {
  CublasHandles cuda;
  EXPECT_TRUE(cuda.creates_handle(kCuda, false));
  EXPECT_FALSE(cuda.creates_handle(kCuda, false));
  EXPECT_TRUE(cuda.creates_handle(kCuda, true));  // the autograd engine's thread
  EXPECT_FALSE(cuda.creates_handle(kCuda, true));
  CublasHandles cpu;
  EXPECT_FALSE(cpu.creates_handle(kCpu, false));
  EXPECT_FALSE(cpu.creates_handle(kCpu, true));
  EXPECT_TRUE(aten_op_uses_cublas("aten::addmm"));
  EXPECT_FALSE(aten_op_uses_cublas("aten::convolution"));
}

TEST(DeviceRules, DropoutKeepsAMaskOnlyOnCudaOutOfPlace) {
  EXPECT_TRUE(keeps_dropout_mask(kCuda, false, 0.1, 10));
  EXPECT_FALSE(keeps_dropout_mask(kCuda, true, 0.1, 10));  // in place: noise
  EXPECT_FALSE(keeps_dropout_mask(kCuda, false, 1.0, 10));
  EXPECT_FALSE(keeps_dropout_mask(kCuda, false, 0.1, 0));
  EXPECT_FALSE(keeps_dropout_mask(kCpu, false, 0.1, 10));
  EXPECT_EQ(dropout_kept_bytes(kCuda, 4000, 4), 1000);  // fp32 noise -> bool mask
  EXPECT_EQ(dropout_kept_bytes(kCpu, 4000, 4), 4000);
  EXPECT_EQ(dropout_kept_bytes(kCuda, 4000, 0), 4000);  // dtype unknown: as recorded
}

TEST(DeviceRules, TorchVersionDecidesSumsAndRecompute) {
  EXPECT_TRUE(adds_gradient_in_place(kCuda, true));
  EXPECT_FALSE(adds_gradient_in_place(kCuda, false));
  EXPECT_FALSE(adds_gradient_in_place(kCpu, true));
  EXPECT_TRUE(recompute_stops_early(kCuda));
  EXPECT_FALSE(recompute_stops_early(kCpu));
}

TEST(DeviceRules, HostScalarsWorkspacesAndScaler) {
  EXPECT_TRUE(host_tensors_use_device_memory(kCpu));
  EXPECT_FALSE(host_tensors_use_device_memory(kCuda));
  EXPECT_TRUE(kernels_take_workspaces(kCuda));
  EXPECT_FALSE(kernels_take_workspaces(kCpu));
  EXPECT_TRUE(uses_grad_scaler(kCuda, Precision::kAmpFp16));
  EXPECT_FALSE(uses_grad_scaler(kCuda, Precision::kAmpBf16));
  EXPECT_FALSE(uses_grad_scaler(kCpu, Precision::kAmpFp16));
}

}  // namespace
}  // namespace trainfit
