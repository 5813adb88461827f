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

// resnet18's convolutions at batch 32 in fp32, as the H100 recordings measured them and as the
// rule alone gives them (Note [cuDNN convolution workspaces]).
ConvProblem resnet_conv(int64_t in_channels, int64_t out_channels, int64_t side, int64_t kernel,
                        int64_t stride) {
  ConvProblem p;
  p.batch = 32;
  p.in_channels = in_channels;
  p.out_channels = out_channels;
  p.in_spatial = {side, side};
  const int64_t pad = kernel / 2;
  const int64_t out = (side + 2 * pad - kernel) / stride + 1;
  p.out_spatial = {out, out};
  p.kernel = {kernel, kernel};
  p.stride = {stride, stride};
  p.padding = {pad, pad};
  p.dilation = {1, 1};
  return p;
}

TEST(DeviceRules, ConvolutionsConvertNchwTensorsInTheirWorkspace) {
  // layer2's 3x3, 128 channels at 28x28: X = Y = 12,845,056, W = 589,824 bytes.
  const ConvProblem c = resnet_conv(128, 128, 28, 3, 1);
  const ConvWorkspaces rule = cudnn_conv_rule(c);
  EXPECT_EQ(rule.forward, 12845056 + 12845056 + 589824 + 16);
  EXPECT_EQ(rule.backward_data, rule.forward);
  EXPECT_EQ(rule.backward_filter, rule.forward + int64_t{14} * 589824);  // split-K partials
  // The H100 recorded exactly that forward, and a backward-filter 14 x W + 679 above it.
  const ConvWorkspaces h100 = cudnn_conv_workspaces(c, 90);
  EXPECT_EQ(h100.measured, 3);
  EXPECT_EQ(h100.forward, 26279952);
  EXPECT_EQ(h100.backward_filter, 34538151);
  // The same problem at a batch no run recorded: the recording of the nearest batch below (32,
  // or 8 for 16) scaled up by the batch ratio.
  ConvProblem b64 = c;
  b64.batch = 64;
  EXPECT_EQ(cudnn_conv_workspaces(b64, 90).measured, 0);
  EXPECT_EQ(cudnn_conv_workspaces(b64, 90).forward, 2 * 26279952);
  EXPECT_EQ(cudnn_conv_workspaces(b64, 90).backward_filter, 2 * 34538151);
  ConvProblem b16 = c;
  b16.batch = 16;
  EXPECT_EQ(cudnn_conv_workspaces(b16, 90).forward, 2 * 7012368);
  // Below every recorded batch: the rule (X + Y + W + 16 at batch 4), held between the nearest
  // recording above (8) scaled down and that recording itself.
  ConvProblem b4 = c;
  b4.batch = 4;
  EXPECT_EQ(cudnn_conv_rule(b4).forward, 2 * 1605632 + 589824 + 16);
  EXPECT_EQ(cudnn_conv_workspaces(b4, 90).forward, 2 * 1605632 + 589824 + 16);
  EXPECT_GT(cudnn_conv_workspaces(b4, 90).forward, 7012368 / 2);
  // Where the rule says less than the recording scaled down, the scaled recording: resnet50's
  // 1x1 from 256 to 128 channels at 56x56 asked 400 bytes at batch 8 (and at 32) where the
  // rule, a GEMM on the NCHW planes, says none.
  ConvProblem pointwise_b4 = resnet_conv(256, 128, 56, 1, 1);
  pointwise_b4.batch = 4;
  EXPECT_EQ(cudnn_conv_rule(pointwise_b4).forward, 0);
  EXPECT_EQ(cudnn_conv_workspaces(pointwise_b4, 90).forward, 200);
  // A problem no batch recorded takes the rule.
  ConvProblem unrecorded = b64;
  unrecorded.in_channels = 96;
  EXPECT_EQ(cudnn_conv_workspaces(unrecorded, 90).forward, cudnn_conv_rule(unrecorded).forward);
  // Other architectures take the rule.
  EXPECT_EQ(cudnn_conv_workspaces(b64, 80).forward, cudnn_conv_rule(b64).forward);
  EXPECT_EQ(cudnn_conv_workspaces(c, 80).measured, 0);
  EXPECT_EQ(cudnn_conv_workspaces(c, 80).backward_filter, rule.backward_filter);
  // A pointwise convolution is a GEMM on NCHW planes: its weight gradient sums fp32 partials
  // per image, 64 at most.
  const ConvProblem pointwise = resnet_conv(64, 256, 56, 1, 1);
  EXPECT_EQ(cudnn_conv_rule(pointwise).forward, 0);
  EXPECT_EQ(cudnn_conv_rule(pointwise).backward_filter, int64_t{32} * 64 * 256 * 4);
  ConvProblem wide = pointwise;
  wide.batch = 256;
  EXPECT_EQ(cudnn_conv_rule(wide).backward_filter, int64_t{64} * 64 * 256 * 4);
  // A strided 1x1 converts input and output only (a 1x1 weight reads the same in NHWC).
  const ConvProblem strided = resnet_conv(256, 512, 14, 1, 2);
  EXPECT_EQ(cudnn_conv_rule(strided).forward, 6422528 + 3211264 + 16);
  // channels_last tensors need no conversion.
  ConvProblem nhwc = c;
  nhwc.memory_format = MemoryFormat::kChannelsLast;
  EXPECT_EQ(cudnn_conv_rule(nhwc).forward, 0);
  EXPECT_EQ(cudnn_conv_rule(nhwc).backward_filter, int64_t{14} * 589824);
  // Sizes too big to count take none rather than overflowing.
  ConvProblem huge = c;
  huge.batch = int64_t{1} << 50;
  EXPECT_EQ(cudnn_conv_rule(huge).forward, 0);
}

TEST(DeviceRules, BenchmarkModeTrialsAreMeasuredOrUnknown) {
  // resnet50's first convolution at batch 64 on the H100: a 257 MB trial, a 244 MB plan.
  ConvProblem conv1 = resnet_conv(3, 64, 224, 7, 2);
  conv1.batch = 64;
  const ConvPlanSearch s = cudnn_benchmark_search(conv1, 0, 90);
  EXPECT_TRUE(s.measured);
  EXPECT_EQ(s.trial_bytes, 256951312);
  EXPECT_EQ(s.chosen_bytes, 244093712);
  // Unmeasured: the heuristic plan's workspace stands for both.
  const ConvPlanSearch other = cudnn_benchmark_search(conv1, 0, 80);
  EXPECT_FALSE(other.measured);
  EXPECT_EQ(other.trial_bytes, cudnn_conv_rule(conv1).forward);
  EXPECT_EQ(other.chosen_bytes, other.trial_bytes);
  EXPECT_EQ(cudnn_problem_key(conv1, 0), cudnn_problem_key(conv1, 0));
  EXPECT_NE(cudnn_problem_key(conv1, 0), cudnn_problem_key(conv1, 2));
  ConvProblem b32 = conv1;
  b32.batch = 32;
  EXPECT_NE(cudnn_problem_key(conv1, 0), cudnn_problem_key(b32, 0));
}

TEST(DeviceRules, ColumnSumsStageTheirPartialsOnTheH100) {
  // A linear layer's bias gradient: ViT-B/16's 768 and 3072 features over 1,576 rows (batch 8)
  // and 6,304 (batch 32), as the recordings allocated them.
  const auto bias = [](int64_t features, int64_t rows) {
    ReduceProblem r;
    r.outputs = features;
    r.inputs_per_output = rows;
    r.contiguous_inputs = false;
    r.sm_count = 132;
    r.sm = 90;
    return cuda_reduce_scratch(r);
  };
  EXPECT_EQ(bias(768, 1576).buffer, 9830400);
  EXPECT_EQ(bias(768, 1576).semaphores, 24);
  EXPECT_EQ(bias(3072, 1576).buffer, 39321600);
  EXPECT_EQ(bias(3072, 1576).semaphores, 96);
  EXPECT_EQ(bias(768, 6304).buffer, 38928384);
  EXPECT_EQ(bias(3072, 6304).buffer, 138412032);
  EXPECT_EQ(bias(128, 4096).buffer, 4194304);  // Qwen2.5-0.5B's k_proj bias, 4 x 1024 tokens
  EXPECT_EQ(bias(1000, 32).buffer, 0);         // few rows: one block per output, no staging
  EXPECT_EQ(cublaslt_workspace_bytes(), int64_t{1} << 20);
}

// Note [Workspace bounds]
TEST(DeviceRules, TheBoundCoversEveryRecordedFamilyAndBacksOffElsewhere) {
  // A recorded problem: its own measurement is within its family's bound, and a measured
  // figure stays as it is at the bound.
  const ConvProblem c = resnet_conv(128, 128, 28, 3, 1);
  const ConvWorkspaces h100 = cudnn_conv_workspaces(c, 90);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(h100.source[static_cast<size_t>(d)], FigureSource::kMeasured);
    EXPECT_GE(cudnn_conv_bound(c, d), h100.bytes(d));
    EXPECT_EQ(h100.bound[static_cast<size_t>(d)], h100.bytes(d));
  }
  // Not recorded at batch 64: scaled, and at the bound it takes the bound.
  ConvProblem b64 = c;
  b64.batch = 64;
  const ConvWorkspaces scaled = cudnn_conv_workspaces(b64, 90);
  EXPECT_EQ(scaled.source[0], FigureSource::kScaled);
  EXPECT_EQ(scaled.bound[0], std::max(scaled.forward, cudnn_conv_bound(b64, 0)));
  // Elsewhere than Hopper every problem is the rule's; the bound is above it.
  const ConvWorkspaces ampere = cudnn_conv_workspaces(c, 80);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(ampere.source[static_cast<size_t>(d)], FigureSource::kRule);
    EXPECT_GT(cudnn_conv_bound(c, d), ampere.bytes(d));
  }
  // bf16 borrows fp16's recordings, which do not measure it.
  ConvProblem half = c;
  half.itemsize = 2;
  half.batch = 32;
  half.dtype = DType::kFloat16;
  ConvProblem bf16 = half;
  bf16.dtype = DType::kBFloat16;
  EXPECT_EQ(cudnn_conv_workspaces(half, 90).source[0], FigureSource::kMeasured);
  EXPECT_EQ(cudnn_conv_workspaces(bf16, 90).source[0], FigureSource::kScaled);
  EXPECT_EQ(cudnn_conv_workspaces(bf16, 90).forward, cudnn_conv_workspaces(half, 90).forward);
  // A family no recording covers (depthwise here) takes the direction's largest ratio over all
  // families, which is at least its dense counterpart's family ratio: its bound per byte of S is
  // no smaller.
  ConvProblem depthwise = resnet_conv(128, 128, 28, 3, 1);
  depthwise.groups = 128;
  const int64_t dense_bound = cudnn_conv_bound(c, 0);
  const int64_t depthwise_bound = cudnn_conv_bound(depthwise, 0);
  const int64_t x = int64_t{32} * 128 * 28 * 28 * 4;
  const auto per_byte = [](int64_t bound, int64_t size) {
    return static_cast<double>(bound) / static_cast<double>(size);
  };
  const int64_t depthwise_weight = int64_t{128} * 9 * 4;
  const int64_t dense_weight = int64_t{128} * 128 * 9 * 4;
  EXPECT_GE(per_byte(depthwise_bound, 2 * x + depthwise_weight),
            per_byte(dense_bound, 2 * x + dense_weight) * 0.999);
  EXPECT_GT(depthwise_bound, cudnn_conv_rule(depthwise).forward);
}

}  // namespace
}  // namespace trainfit
