// The published figures these formulas must give back.
#include "estimate/zero_formulas.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The ZeRO paper's figure 1: a 7.5B-parameter model on 64 GPUs with mixed-precision Adam
// (K = 12) needs 120 GB of model states per GPU, 31.4 GB with P_os, 16.6 GB with P_os+g and
// 1.9 GB with P_os+g+p (GB = 10^9 bytes, one decimal).
TEST(ZeroFormulas, TheZeroPapersFigureOne) {
  const double psi = 7.5e9;
  EXPECT_DOUBLE_EQ(zero_paper_bytes(psi, ZeroStage::kNone, 64), 120e9);
  EXPECT_NEAR(zero_paper_bytes(psi, ZeroStage::kOs, 64) / 1e9, 31.4, 0.05);
  EXPECT_NEAR(zero_paper_bytes(psi, ZeroStage::kOsGrad, 64) / 1e9, 16.6, 0.05);
  EXPECT_NEAR(zero_paper_bytes(psi, ZeroStage::kOsGradParams, 64) / 1e9, 1.9, 0.05);
  // One rank: no stage saves anything.
  for (const ZeroStage s : {ZeroStage::kOs, ZeroStage::kOsGrad, ZeroStage::kOsGradParams}) {
    EXPECT_DOUBLE_EQ(zero_paper_bytes(psi, s, 1), 120e9);
  }
}

// DeepSpeed's memory.rst: t5-3b estimated cold (2851M parameters, 32M in the largest layer) on
// one node of 8 GPUs prints, per GPU and per CPU in GiB to two decimals:
//   ZeRO-3  0.12 | 71.69  offload_param=cpu,  offload_optimizer=cpu,  zero_init=1
//           0.12 | 127.45 the same with zero_init=0
//           0.78 | 63.72  offload_param=none, offload_optimizer=cpu,  zero_init=1
//           0.78 | 127.45 the same with zero_init=0
//           6.09 | 1.43   offload_param=none, offload_optimizer=none, zero_init=1
//           6.09 | 127.45 the same with zero_init=0
//   ZeRO-2  5.31 | 127.45 offload_optimizer=cpu; 15.93 | 127.45 offload_optimizer=none (the
//           formula before PR #5099)
TEST(ZeroFormulas, DeepSpeedsMemoryDocT5_3b) {
  struct Row {
    bool offload_optimizer, offload_params, zero_init;
    double gpu_gib, cpu_gib;
  };
  for (const Row& row :
       {Row{true, true, true, 0.12, 71.69}, Row{true, true, false, 0.12, 127.45},
        Row{true, false, true, 0.78, 63.72}, Row{true, false, false, 0.78, 127.45},
        Row{false, false, true, 6.09, 1.43}, Row{false, false, false, 6.09, 127.45}}) {
    const DeepSpeedEstimate e = deepspeed_zero3({.params = 2851e6,
                                                 .largest_layer_params = 32e6,
                                                 .gpus = 8,
                                                 .offload_optimizer = row.offload_optimizer,
                                                 .offload_params = row.offload_params,
                                                 .zero_init = row.zero_init});
    SCOPED_TRACE(row.gpu_gib);
    EXPECT_NEAR(static_cast<double>(e.gpu_bytes) / kGiB, row.gpu_gib, 0.005);
    EXPECT_NEAR(static_cast<double>(e.cpu_bytes) / kGiB, row.cpu_gib, 0.005);
  }
  DeepSpeedSetup s{.params = 2851e6, .gpus = 8};
  EXPECT_NEAR(static_cast<double>(deepspeed_zero2(s, true).gpu_bytes) / kGiB, 15.93, 0.005);
  EXPECT_NEAR(static_cast<double>(deepspeed_zero2(s, true).cpu_bytes) / kGiB, 127.45, 0.005);
  s.offload_optimizer = true;
  EXPECT_NEAR(static_cast<double>(deepspeed_zero2(s, true).gpu_bytes) / kGiB, 5.31, 0.005);
  EXPECT_NEAR(static_cast<double>(deepspeed_zero2(s, true).cpu_bytes) / kGiB, 127.45, 0.005);
  EXPECT_EQ(deepspeed_zero2(s).gpu_bytes, deepspeed_zero2(s, true).gpu_bytes);
}

// memory.rst's t5-large example on 4 GPUs (737.67M parameters, 32.90M in the largest layer):
// 125 MB for the largest layer, 3291 MB (no offload), 125 MB (everything offloaded), 477 MB
// (optimizer offloaded), in MiB rounded down. The inputs are rounded, so within 1 MiB.
TEST(ZeroFormulas, DeepSpeedsMemoryDocT5Large) {
  DeepSpeedSetup s{.params = 737.67e6, .largest_layer_params = 32.90e6, .gpus = 4};
  const auto mib = [](int64_t bytes) { return static_cast<double>(bytes >> 20); };
  EXPECT_NEAR(mib(deepspeed_zero3(s).gpu_bytes), 3291, 1);
  s.offload_optimizer = true;
  EXPECT_NEAR(mib(deepspeed_zero3(s).gpu_bytes), 477, 1);
  s.offload_params = true;
  EXPECT_NEAR(mib(deepspeed_zero3(s).gpu_bytes), 125, 1);
}

// The current ZeRO-2 estimator: 2 bytes replicated and 18 partitioned per parameter, so a 13B
// model on 8 GPUs needs 26 + 18 x 13 / 8 = 55.25 GB, where the legacy formula says 78 GB.
TEST(ZeroFormulas, CurrentZero2CountsTheFp32Gradients) {
  const DeepSpeedSetup s{.params = 13e9, .gpus = 8};
  EXPECT_EQ(deepspeed_zero2(s).gpu_bytes, int64_t{55'250'000'000});
  EXPECT_EQ(deepspeed_zero2(s, true).gpu_bytes, int64_t{78'000'000'000});
  // Two nodes halve the partitioned part.
  const DeepSpeedSetup two{.params = 13e9, .gpus = 8, .nodes = 2};
  EXPECT_EQ(deepspeed_zero2(two).gpu_bytes, int64_t{26'000'000'000} + int64_t{14'625'000'000});
}

}  // namespace
}  // namespace trainfit
