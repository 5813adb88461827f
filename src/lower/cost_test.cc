#include "lower/cost.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "lower/two_layers_test_util.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

// The part's kernels (host work alone left out).
std::vector<KernelCost> of_part(const StepCost& c, StepPart part) {
  std::vector<KernelCost> out;
  for (const KernelCost& k : c.kernels) {
    if (k.part == part && k.launches > 0) out.push_back(k);
  }
  return out;
}

CpuWork host_of(const StepCost& c, StepPart part) {
  return c.cpu[static_cast<size_t>(part)];
}

// The backward kernels of the first node running `op`.
std::vector<KernelCost> backward_of_op(const Graph& g, const StepCost& c, std::string_view op) {
  std::vector<KernelCost> out;
  const NodeId node = node_of(g, op);
  for (const KernelCost& k : of_part(c, StepPart::kBackward)) {
    if (k.node == node) out.push_back(k);
  }
  return out;
}

Graph linear_then_softmax(Device device) {
  BuildOptions o;
  o.target.device = device;
  GraphBuilder b("softmax", o);
  ValueId y = b.input("x", {4, 8}, DType::kFloat32);
  {
    auto fc = b.module("fc", "Linear");
    y = b.call1("linear", {y}, {{"out_features", int64_t{32}}});
  }
  b.set_loss(b.call1("sum", {b.call1("softmax", {y}, {{"dim", int64_t{-1}}})}));
  return *std::move(b).finish();
}

TEST(Cost, CudasSoftmaxBackwardMultipliesInAKernelOfItsOwnFirst) {
  // Note [Softmax's backward]: grad * output into a temporary, then the softmax kernel reads it
  // with the output and writes the gradient. The CPU's kernel takes the gradient itself.
  const double tensor = 4.0 * 4 * 32;
  const Graph cuda = linear_then_softmax(Device::kCuda);
  const std::vector<KernelCost> k =
      backward_of_op(cuda, *step_cost(cuda, TrainingConfig{}, {}), "softmax");
  ASSERT_EQ(k.size(), 2U);
  EXPECT_DOUBLE_EQ(k[0].bytes, 3 * tensor);  // incoming and output read, product written
  EXPECT_DOUBLE_EQ(k[1].bytes, 3 * tensor);  // product and output read, gradient written
  const Graph cpu = linear_then_softmax(Device::kCpu);
  EXPECT_EQ(backward_of_op(cpu, *step_cost(cpu, TrainingConfig{}, {}), "softmax").size(), 1U);
}

TEST(Cost, ABroadcastOperandsGradientIsMadeFullSizeThenSummedDown) {
  GraphBuilder b("film", {});
  ValueId y = b.input("x", {4, 8}, DType::kFloat32);
  ValueId scale = b.input("z", {1, 8}, DType::kFloat32);
  {
    auto fc = b.module("fc", "Linear");
    y = b.call1("linear", {y}, {{"out_features", int64_t{16}}});
  }
  {
    auto fc = b.module("scale", "Linear");
    scale = b.call1("linear", {scale}, {{"out_features", int64_t{16}}});
  }
  b.set_loss(b.call1("sum", {b.call1("mul", {y, scale})}));
  const Graph g = *std::move(b).finish();
  const std::vector<KernelCost> k = backward_of_op(g, *step_cost(g, TrainingConfig{}, {}), "mul");
  // scale's gradient first (grad * y at 4 x 16, then its sum to 1 x 16), then y's (grad *
  // scale). Each formula reads the incoming gradient and what the node saved (y and scale).
  const double full = 4.0 * 4 * 16;
  const double row = 4.0 * 16;
  ASSERT_EQ(k.size(), 3U);
  EXPECT_DOUBLE_EQ(k[0].bytes, 3 * full + row);  // the full-size product written
  EXPECT_DOUBLE_EQ(k[1].bytes, full + row);      // the product read, the sum written
  EXPECT_DOUBLE_EQ(k[2].bytes, 3 * full + row);  // y's gradient written
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
  // conv1's forward transposes its input and weight in and its output out: three kernels, each
  // reading and writing its tensor once.
  const KernelCost& layout = c.kernels[1];
  ASSERT_TRUE(layout.tensor_core_layout);
  EXPECT_EQ(layout.launches, 3);
  EXPECT_DOUBLE_EQ(layout.bytes, 2.0 * 4 * (2 * 3 * 224 * 224 + 64 * 3 * 49 + 2 * 64 * 112 * 112));
  // Each direction of a convolution is its own cuDNN call on the host.
  EXPECT_EQ(conv1.host.cudnn_calls, 1);
  // Three input channels of 4 bytes are no whole 16-byte vector: cuDNN gathers conv1's im2col,
  // M x K elements, in forward and in its weight gradient; 64 channels are read as vectors.
  EXPECT_DOUBLE_EQ(conv1.gathered_bytes, 4.0 * (2 * 112 * 112) * (3 * 49));
  int gathered = 0;
  for (const KernelCost& k : c.kernels) {
    if (k.gathered_bytes > 0) {
      ++gathered;
      EXPECT_DOUBLE_EQ(k.gathered_bytes, conv1.gathered_bytes);
    }
  }
  EXPECT_EQ(gathered, 2);  // the input needs no gradient: no backward-data
}

TEST(Cost, OnlyForwardAndTheWeightGradientGatherTheIm2col) {
  GraphBuilder b("convs", {});
  ValueId y = b.input("x", {2, 3, 16, 16}, DType::kFloat32);
  for (const char* name : {"conv1", "conv2"}) {
    auto conv = b.module(name, "Conv2d");
    y = b.call1("conv2d", {y}, {{"out_channels", int64_t{3}}, {"kernel_size", int64_t{3}}});
  }
  b.set_loss(b.call1("sum", {y}));
  const Graph g = *std::move(b).finish();
  const StepCost c = *step_cost(g, TrainingConfig{}, {});
  // Both convolutions take 3 channels: forward and weight gradient gather, conv2's input
  // gradient (a product of the gradient and the weight) does not.
  int gathered = 0;
  int products = 0;
  for (const KernelCost& k : c.kernels) {
    if (!k.is_gemm) continue;
    ++products;
    if (k.gathered_bytes > 0) ++gathered;
  }
  EXPECT_EQ(products, 5);
  EXPECT_EQ(gathered, 4);
}

TEST(Cost, GroupNormsBackwardRunsABlockPerSampleAndChannel) {
  GraphBuilder b("gn", {});
  ValueId y = b.input("x", {64, 512, 16}, DType::kFloat32);
  {
    auto gn = b.module("norm", "GroupNorm");
    y = b.call1("group_norm", {y}, {{"num_groups", int64_t{8}}});
  }
  b.set_loss(b.call1("sum", {y}));
  const Graph g = *std::move(b).finish();
  const StepCost c = *step_cost(g, TrainingConfig{}, {});
  // ComputeInternalGradientsCUDAKernel: N x C blocks of one warp over 16 positions each.
  int grids = 0;
  for (const KernelCost& k : c.kernels) {
    if (k.grid.blocks == 0) continue;
    ++grids;
    EXPECT_EQ(k.part, StepPart::kBackward);
    EXPECT_EQ(k.grid.blocks, 64 * 512);
    EXPECT_EQ(k.grid.threads, 32);
  }
  EXPECT_EQ(grids, 1);
}

TEST(Cost, EveryModuleIsCalledWhereItsFirstOpRuns) {
  GraphBuilder b("modules", {});
  ValueId y = b.input("x", {4, 8}, DType::kFloat32);
  {
    auto model = b.module("", "Net");
    auto block = b.module("block", "Sequential");
    {
      auto fc = b.module("fc", "Linear");
      y = b.call1("linear", {y}, {{"out_features", int64_t{8}}});
    }
    {
      auto act = b.module("act", "ReLU");
      y = b.call1("relu", {y});
    }
  }
  b.set_loss(b.call1("sum", {y}));
  const Graph g = *std::move(b).finish();
  const StepCost c = *step_cost(g, TrainingConfig{}, {});
  // block and block.fc are entered at the linear, block.act at the relu; the model itself is
  // the script's call, as is the sum. Backward calls no module.
  EXPECT_EQ(host_of(c, StepPart::kForward).module_calls, 3);
  EXPECT_EQ(host_of(c, StepPart::kForward).dispatches, 3);
  EXPECT_EQ(host_of(c, StepPart::kBackward).module_calls, 0);
}

TEST(Cost, TheHostIssuesEveryKernelAndTheWorkBetween) {
  const Graph g = two_linear_layers();
  const StepCost c = *step_cost(g, TrainingConfig{}, {});
  // Each kernel carries its own launches; the sums per part are the kernels'.
  CpuWork sum;
  for (const KernelCost& k : c.kernels) {
    EXPECT_EQ(k.host.launches, static_cast<double>(k.launches));
    if (k.part == StepPart::kBackward) sum += k.host;
  }
  EXPECT_EQ(sum.launches, host_of(c, StepPart::kBackward).launches);
  EXPECT_EQ(sum.dispatches, host_of(c, StepPart::kBackward).dispatches);
  // fc2's backward hands on two gradients (x and W), its bias a third: the engine's extra
  // edges; the sum's backward none.
  EXPECT_GT(host_of(c, StepPart::kBackward).edges, 0);
  // The optimizer's Python loops visit each trainable tensor twice (step's _init_group and
  // zero_grad): four tensors here.
  EXPECT_EQ(host_of(c, StepPart::kOptimizer).params, 8);
}

TEST(Cost, AdamReadsItsStepCountersBackWhenTheyLiveOnTheGpu) {
  const Graph g = two_linear_layers();
  TrainingConfig t;
  t.optimizer.kind = OptimizerKind::kAdamW;
  t.optimizer.impl = OptimizerImpl::kForeach;
  // Host counters: += 1 and two .item() per tensor are host work, no synchronisation.
  EXPECT_EQ(host_of(*step_cost(g, t, {}), StepPart::kOptimizer).syncs, 0);
  EXPECT_EQ(host_of(*step_cost(g, t, {}), StepPart::kOptimizer).views, 3 * 4);
  // Under a CUDA default device: bias_correction1 and 2 read each of the four back.
  t.optimizer.step_on_device = true;
  t.optimizer.default_device_mode = true;
  const StepCost foreach = *step_cost(g, t, {});
  EXPECT_EQ(host_of(foreach, StepPart::kOptimizer).syncs, 8);
  // The mode sees every Python call: the forward's ops and the optimizer's.
  EXPECT_EQ(host_of(foreach, StepPart::kForward).mode_calls,
            host_of(foreach, StepPart::kForward).dispatches);
  EXPECT_GE(host_of(foreach, StepPart::kOptimizer).mode_calls, 8);
  // The reads come after addcmul_ and before the square root: the update's second half waits.
  size_t reads = 0;
  for (size_t i = 0; i < foreach.kernels.size(); ++i) {
    if (foreach.kernels[i].host.syncs > 0) reads = i;
  }
  ASSERT_GT(reads, 0U);
  EXPECT_EQ(foreach.kernels.size() - reads, 1 + 4 + 1);  // the reads, four ops, zero_grad
  // The for-loop reads once per tensor.
  t.optimizer.impl = OptimizerImpl::kLoop;
  EXPECT_EQ(host_of(*step_cost(g, t, {}), StepPart::kOptimizer).syncs, 4);
  // Fused keeps its counters on the GPU and never reads them.
  t.optimizer.impl = OptimizerImpl::kFused;
  EXPECT_EQ(host_of(*step_cost(g, t, {}), StepPart::kOptimizer).syncs, 0);
}

TEST(Cost, ListOpsMakeAViewPerPieceAndTheirBackwardHandsOnEach) {
  GraphBuilder b("lists", {});
  ValueId y = b.input("x", {6, 2, 8}, DType::kFloat32);
  {
    auto fc = b.module("fc", "Linear");
    y = b.call1("linear", {y}, {{"out_features", int64_t{8}}});
  }
  const std::vector<ValueId> pieces = b.call("unbind", {y});
  b.set_loss(b.call1("sum", {b.call1("stack", pieces)}));
  const Graph g = *std::move(b).finish();
  const StepCost c = *step_cost(g, TrainingConfig{}, {});
  // list(y): six selects; stack's backward cuts six slices and hands on six gradients (and
  // sum's backward expands its gradient, one view more).
  EXPECT_EQ(host_of(c, StepPart::kForward).views, 6);
  EXPECT_EQ(host_of(c, StepPart::kBackward).views, 7);
  EXPECT_GE(host_of(c, StepPart::kBackward).edges, 5);
}

}  // namespace
}  // namespace trainfit
