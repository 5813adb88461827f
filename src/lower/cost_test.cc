#include "lower/cost.h"

#include <gtest/gtest.h>

#include "lower/two_layers_test_util.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

std::vector<KernelCost> of_part(const StepCost& c, StepPart part) {
  std::vector<KernelCost> out;
  for (const KernelCost& k : c.kernels) {
    if (k.part == part) out.push_back(k);
  }
  return out;
}

TEST(Cost, ForwardKernelsReadTheirInputsAndWriteTheirOutputs) {
  const Graph g = two_linear_layers();
  const StepCost c = *step_cost(g, TrainingConfig{}, {});
  const std::vector<KernelCost> fwd = of_part(c, StepPart::kForward);
  ASSERT_EQ(fwd.size(), 4U);  // linear, relu, linear, sum
  // fc1: x (4x8), W (16x8), b (16) read; y (4x16) written; a 4 x 16 x 8 product.
  EXPECT_TRUE(fwd[0].is_gemm);
  EXPECT_EQ(fwd[0].gemm.m, 4);
  EXPECT_EQ(fwd[0].gemm.n, 16);
  EXPECT_EQ(fwd[0].gemm.k, 8);
  EXPECT_EQ(fwd[0].math, MathPath::kFp32);
  EXPECT_DOUBLE_EQ(fwd[0].flops, 2.0 * 4 * 16 * 8);
  EXPECT_DOUBLE_EQ(fwd[0].bytes, 4.0 * (4 * 8 + 16 * 8 + 16 + 4 * 16));
  // relu: reads and writes 4 x 16.
  EXPECT_FALSE(fwd[1].is_gemm);
  EXPECT_DOUBLE_EQ(fwd[1].bytes, 4.0 * 2 * 4 * 16);
  EXPECT_EQ(c.samples, 4);
  EXPECT_DOUBLE_EQ(c.cpu[static_cast<size_t>(StepPart::kForward)].dispatches, 4);
}

TEST(Cost, BackwardComputesOnlyTheGradientsThatAreNeeded) {
  const Graph g = two_linear_layers();
  const StepCost c = *step_cost(g, TrainingConfig{}, {});
  int gemms = 0;
  for (const KernelCost& k : of_part(c, StepPart::kBackward)) gemms += k.is_gemm ? 1 : 0;
  // fc2: dx and dW; fc1: dW only (the model input needs no gradient).
  EXPECT_EQ(gemms, 3);
  // fc1's weight gradient: W^T-shaped product 16 x 8 over the 4 rows.
  bool found = false;
  for (const KernelCost& k : of_part(c, StepPart::kBackward)) {
    if (k.is_gemm && k.gemm.m == 8 && k.gemm.n == 16 && k.gemm.k == 4) found = true;
  }
  EXPECT_TRUE(found);
}

TEST(Cost, TheOptimizerRunsTheKernelsOfItsImplementation) {
  const Graph g = two_linear_layers();
  TrainingConfig t;
  t.optimizer.kind = OptimizerKind::kAdamW;
  const int64_t params = 16 * 8 + 16 + 2 * 16 + 2;
  t.optimizer.impl = OptimizerImpl::kForeach;
  const StepCost foreach = *step_cost(g, t, {});
  const std::vector<KernelCost> f = of_part(foreach, StepPart::kOptimizer);
  // AdamW: mul_, lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_: 20 element accesses.
  ASSERT_EQ(f.size(), 8U);
  double bytes = 0;
  for (const KernelCost& k : f) bytes += k.bytes;
  EXPECT_DOUBLE_EQ(bytes, 4.0 * 20 * params);
  t.optimizer.impl = OptimizerImpl::kFused;
  const std::vector<KernelCost> fused = of_part(*step_cost(g, t, {}), StepPart::kOptimizer);
  ASSERT_EQ(fused.size(), 1U);
  EXPECT_DOUBLE_EQ(fused[0].bytes, 4.0 * 7 * params);
  t.optimizer.impl = OptimizerImpl::kLoop;
  const std::vector<KernelCost> loop = of_part(*step_cost(g, t, {}), StepPart::kOptimizer);
  EXPECT_EQ(loop[0].launches, 4);  // one per parameter
}

TEST(Cost, MultiTensorApplyGroupsTensorsAndChunks) {
  // 36 tensors a launch at depth 4; 320 chunks of 65,536 elements.
  EXPECT_EQ(multi_tensor_launches(std::vector<int64_t>(36, 10), 4), 1);
  EXPECT_EQ(multi_tensor_launches(std::vector<int64_t>(37, 10), 4), 2);
  EXPECT_EQ(multi_tensor_launches(std::vector<int64_t>(110, 10), 1), 1);
  EXPECT_EQ(multi_tensor_launches({int64_t{320} * 65536}, 4), 1);
  EXPECT_EQ(multi_tensor_launches({int64_t{320} * 65536 + 1}, 4), 2);
  EXPECT_EQ(multi_tensor_launches({}, 4), 0);
}

TEST(Cost, MicroBatchesRepeatForwardAndBackwardButNotTheOptimizer) {
  const Graph g = two_linear_layers();
  TrainingConfig t;
  t.grad_accum = 4;
  const StepCost c = *step_cost(g, t, {});
  EXPECT_EQ(c.samples, 16);
  bool accumulates = false;
  for (const KernelCost& k : c.kernels) {
    if (k.part == StepPart::kOptimizer) {
      EXPECT_EQ(k.repeat, 1);
    } else if (k.repeat == 3) {
      accumulates = true;  // each later micro-batch adds into .grad
    } else {
      EXPECT_EQ(k.repeat, 4);
    }
  }
  EXPECT_TRUE(accumulates);
}

TEST(Cost, CheckpointingRecomputesTheForwardOfTheSegment) {
  const Graph g = two_linear_layers();
  TrainingConfig t;
  t.checkpoint = {"fc2"};
  const std::vector<KernelCost> r = of_part(*step_cost(g, t, {}), StepPart::kRecompute);
  ASSERT_EQ(r.size(), 1U);
  EXPECT_DOUBLE_EQ(r[0].flops, 2.0 * 4 * 2 * 16);
}

TEST(Cost, ConvolutionsAreImplicitGemmsAndTf32FollowsPyTorchsDefaults) {
  ModelRequest m;
  m.name = "resnet18";
  m.batch = 2;
  const Graph g = *build_model(m);
  const StepCost c = *step_cost(g, TrainingConfig{}, {});
  // conv1: 7x7, 3 -> 64, stride 2 on 224x224: M = 2 x 112 x 112, N = 64, K = 3 x 49.
  const KernelCost& conv1 = c.kernels.front();
  ASSERT_TRUE(conv1.is_gemm);
  EXPECT_EQ(conv1.gemm.m, 2 * 112 * 112);
  EXPECT_EQ(conv1.gemm.n, 64);
  EXPECT_EQ(conv1.gemm.k, 3 * 49);
  EXPECT_EQ(conv1.math, MathPath::kTf32);  // cudnn.allow_tf32 is on by default
  // The classifier is a cuBLAS matmul: fp32 unless --tf32.
  MathPath fc = MathPath::kTf32;
  for (const KernelCost& k : c.kernels) {
    if (k.part == StepPart::kForward && k.is_gemm && k.gemm.n == 1000) fc = k.math;
  }
  EXPECT_EQ(fc, MathPath::kFp32);
  // channels_first convolutions carry NCHW <-> NHWC transposes; channels_last none.
  auto transposes = [](const StepCost& s) {
    int n = 0;
    for (const KernelCost& k : s.kernels) n += k.tensor_core_layout ? 1 : 0;
    return n;
  };
  EXPECT_GT(transposes(c), 0);
  const StepCost last =
      *step_cost(g, TrainingConfig{}, {.memory_format = MemoryFormat::kChannelsLast});
  EXPECT_EQ(transposes(last), 0);
}

}  // namespace
}  // namespace trainfit
