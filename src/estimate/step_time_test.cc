#include "estimate/step_time.h"

#include <gtest/gtest.h>

#include "graph/builder.h"

namespace trainfit {
namespace {

GpuTiming a100() {
  return catalog_timing(*find_gpu("a100-80gb"));
}

TEST(StepTime, AKernelTakesTheLongerOfComputeAndMemoryPlusItsOverhead) {
  const GpuTiming gpu = a100();
  KernelCost copy;
  copy.bytes = 1e9;  // 1 GB through 2039 GB/s x 0.86
  EXPECT_NEAR(kernel_seconds(copy, gpu), 1e9 / (2039e9 * 0.86) + 2e-6, 1e-12);
  KernelCost gemm;
  gemm.is_gemm = true;
  gemm.gemm = GemmShape{1, 8192, 8192, 8192};
  gemm.flops = gemm.gemm.flops();
  gemm.math = MathPath::kBf16;
  // 64 x 64 tiles of 128 x 128 on 108 SMs: 38 waves, the last one partly idle.
  const double waves = 4096.0 / (38 * 108);
  EXPECT_NEAR(kernel_seconds(gemm, gpu), gemm.flops / (312e12 * 0.869 * waves) + 2e-6, 1e-9);
  // TF32 runs at half the 16-bit rate; FP32 on CUDA cores far below.
  gemm.math = MathPath::kTf32;
  const double tf32 = kernel_seconds(gemm, gpu);
  gemm.math = MathPath::kFp32;
  EXPECT_GT(kernel_seconds(gemm, gpu), 5 * tf32);
}

TEST(StepTime, AHopperProductWritesItsOutputAfterItsMath) {
  const GpuTiming h100 = catalog_timing(*find_gpu("h100-80gb"));
  ASSERT_TRUE(h100.serial_epilogue);
  KernelCost gemm;
  gemm.is_gemm = true;
  gemm.gemm = GemmShape{1, 8192, 8192, 768};
  gemm.flops = gemm.gemm.flops();
  gemm.math = MathPath::kBf16;
  const double out = 8192.0 * 8192 * 2;
  gemm.bytes = 2 * 8192.0 * 768 * 2 + out;
  // 64 x 64 tiles on 132 SMs: 32 waves. The operands stream in under the math; the output
  // follows it at the card's bandwidth.
  const double waves = 4096.0 / (32 * 132);
  const double bandwidth = 3350e9 * h100.efficiency.bandwidth;
  const double math = gemm.flops / (989.4e12 * h100.efficiency.tensor_gemm * waves);
  EXPECT_NEAR(kernel_seconds(gemm, h100), math + out / bandwidth + 2e-6, 1e-12);
  // Where the operands take longer than the math, the product moves bytes, as any kernel.
  KernelCost skinny = gemm;
  skinny.gemm = GemmShape{1, 65536, 8, 4096};
  skinny.flops = skinny.gemm.flops();
  skinny.bytes = (65536.0 * 4096 + 4096.0 * 8 + 65536.0 * 8) * 2;
  EXPECT_NEAR(kernel_seconds(skinny, h100), skinny.bytes / bandwidth + 2e-6, 1e-12);
  // Cards no calibration has shown it on keep the write under the math.
  GpuTiming overlapped = h100;
  overlapped.serial_epilogue = false;
  EXPECT_NEAR(kernel_seconds(gemm, overlapped), math + 2e-6, 1e-12);
  EXPECT_FALSE(a100().serial_epilogue);
}

TEST(StepTime, AGatheredIm2colIsReadThroughTheSmsCaches) {
  const GpuTiming gpu = a100();
  KernelCost conv;
  conv.bytes = 1e9;
  conv.gathered_bytes = 2e9;
  // 108 SMs at 1410 MHz, a nominal 128 bytes a clock each.
  EXPECT_NEAR(
      kernel_seconds(conv, gpu),
      1e9 / (2039e9 * 0.86) + 2e9 / (108 * 1410e6 * 128 * gpu.efficiency.im2col_gather) + 2e-6,
      1e-12);
}

TEST(StepTime, ManySmallBlocksRunInWavesOfWhatTheSmsHold) {
  GpuTiming gpu = a100();
  KernelCost k;
  k.bytes = 1e6;                          // under a microsecond of traffic
  k.grid = {int64_t{108} * 32 * 10, 32};  // ten waves of 32 one-warp blocks on each of 108 SMs
  EXPECT_NEAR(kernel_seconds(k, gpu), 10 * gpu.kernel_overhead_s + gpu.kernel_overhead_s, 1e-12);
  // Turing holds 16 blocks an SM: twice the waves.
  gpu.sm = 75;
  EXPECT_NEAR(kernel_seconds(k, gpu), 20 * gpu.kernel_overhead_s + gpu.kernel_overhead_s, 1e-12);
  // Blocks of 512 threads: four an SM on sm80 (2,048 threads).
  gpu.sm = 80;
  k.grid = {int64_t{108} * 4 * 3, 512};
  EXPECT_NEAR(kernel_seconds(k, gpu), 3 * gpu.kernel_overhead_s + gpu.kernel_overhead_s, 1e-12);
  // Where the traffic takes longer than the waves, the traffic counts.
  k.bytes = 1e9;
  EXPECT_NEAR(kernel_seconds(k, gpu), 1e9 / (2039e9 * 0.86) + 2e-6, 1e-12);
}

TEST(StepTime, AModuleCallCostsAShareOfAnOp) {
  const GpuTiming gpu = a100();
  CpuWork w;
  w.dispatches = 10;
  const double ops = host_seconds(w, StepPart::kForward, gpu);
  EXPECT_NEAR(ops, 10 * gpu.python_op_s, 1e-15);
  w.module_calls = 4;
  EXPECT_NEAR(host_seconds(w, StepPart::kForward, gpu) - ops,
              4 * gpu.module_call_share * gpu.python_op_s, 1e-15);
}

TEST(StepTime, WaveQuantizationAndSplitK) {
  // 108 tiles fill 108 SMs once; 109 need a second wave that is nearly empty.
  EXPECT_DOUBLE_EQ(wave_efficiency(GemmShape{1, int64_t{128} * 108, 128, 64}, 108), 1.0);
  EXPECT_NEAR(wave_efficiency(GemmShape{1, int64_t{128} * 109, 128, 64}, 108), 109.0 / 216, 1e-12);
  // One tile with a long K splits K over the idle SMs.
  EXPECT_DOUBLE_EQ(wave_efficiency(GemmShape{1, 64, 64, int64_t{512} * 108}, 108), 1.0);
}

TEST(StepTime, CardsWithoutTensorMathFallBackToFp32) {
  const GpuTiming v100 = catalog_timing(*find_gpu("v100-16gb"));
  KernelCost k;
  k.is_gemm = true;
  k.gemm = GemmShape{1, 4096, 4096, 4096};
  k.flops = k.gemm.flops();
  k.math = MathPath::kTf32;  // no TF32 before sm80
  const double tf32 = kernel_seconds(k, v100);
  k.math = MathPath::kFp32;
  EXPECT_DOUBLE_EQ(tf32, kernel_seconds(k, v100));
  // A layout transpose for tensor-core math costs nothing where that math is not used.
  KernelCost t;
  t.bytes = 1e9;
  t.math = MathPath::kTf32;
  t.tensor_core_layout = true;
  EXPECT_EQ(kernel_seconds(t, v100), 0);
  EXPECT_GT(kernel_seconds(t, a100()), 0);
}

TEST(StepTime, ATinyModelIsBoundByTheHostDispatchingIt) {
  StepCost c;
  c.samples = 8;
  KernelCost k;
  k.bytes = 1024;  // microseconds of GPU work each
  k.host.dispatches = 1;
  k.host.launches = 1;
  for (int i = 0; i < 100; ++i) c.kernels.push_back(k);
  const GpuTiming gpu = a100();
  const StepTime t = time_step(c, gpu);
  // The host issues a kernel every 10 us; each runs at once and the GPU waits for the next.
  const double kernel = kernel_seconds(k, gpu);
  EXPECT_NEAR(t.step_s, 100 * (gpu.python_op_s + gpu.launch_s) + kernel, 1e-12);
  EXPECT_NEAR(t.gpu_only_s, 100 * kernel, 1e-12);
  EXPECT_NEAR(t.cpu_bound_s, t.step_s - t.gpu_only_s, 1e-12);
  EXPECT_EQ(t.dominant(), TimeShare::kHost);
  EXPECT_NEAR(t.samples_per_s, 8 / t.step_s, 1e-9);
}

// The host runs ahead while the GPU works, so a part heavy on the GPU hides the host's work
// and a part heavy on the host leaves the GPU waiting: the step is more than the larger of
// their totals when the two alternate.
TEST(StepTime, HostAndGpuOverlapOnlyWhereTheQueueHoldsWork) {
  const GpuTiming gpu = a100();
  KernelCost heavy;  // 1 ms on the GPU, 10 us on the host
  heavy.bytes = 1e-3 * 2039e9 * 0.86;
  heavy.host = {.dispatches = 1, .launches = 1};
  KernelCost light;  // 2 us on the GPU, 1.6 ms on the host
  light.bytes = 1;
  light.host = {.dispatches = 200, .launches = 1};
  StepCost both;
  both.samples = 1;
  both.kernels = {heavy, light};
  const StepTime t = time_step(both, gpu);
  // The light op is issued after its 1.6 ms of host work; the heavy kernel ran meanwhile.
  const double heavy_host = gpu.python_op_s + gpu.launch_s;
  const double light_host = 200 * gpu.python_op_s + gpu.launch_s;
  EXPECT_NEAR(t.step_s, heavy_host + light_host + kernel_seconds(light, gpu), 1e-9);
  StepCost alternating;
  alternating.samples = 1;
  alternating.kernels = {light, heavy, light, heavy};
  const StepTime a = time_step(alternating, gpu);
  const double host = 2 * light_host + 2 * heavy_host;
  EXPECT_GT(a.step_s, std::max(a.gpu_only_s, host) + 0.9e-3);
  // The shares add up to the step.
  double shares = 0;
  for (double s : a.share_s) shares += s;
  EXPECT_NEAR(shares, a.step_s, 1e-12);
}

// A read of a GPU value (.item()) waits for everything queued before it: the host cannot run
// ahead across it.
TEST(StepTime, AReadOfAGpuValueDrainsTheQueue) {
  const GpuTiming gpu = a100();
  KernelCost heavy;
  heavy.part = StepPart::kOptimizer;
  heavy.bytes = 1e-3 * 2039e9 * 0.86;
  heavy.host = {.dispatches = 1, .launches = 1};
  KernelCost read;
  read.part = StepPart::kOptimizer;
  read.bytes = 4 * 10;
  read.launches = 10;
  read.host.syncs = 10;
  StepCost c;
  c.samples = 1;
  c.kernels = {heavy, read, heavy};
  const StepTime t = time_step(c, gpu);
  EXPECT_EQ(t.syncs, 10);
  // Without the reads the second heavy kernel would queue behind the first at once.
  const double heavy_s = kernel_seconds(heavy, gpu);
  EXPECT_GT(t.step_s, 2 * heavy_s + 10 * gpu.sync_s);
  c.kernels = {heavy, heavy};
  EXPECT_NEAR(time_step(c, gpu).step_s, gpu.python_op_s + gpu.launch_s + 2 * heavy_s, 1e-9);
}

// Two ops' backward kernels of 1 and 3 GB of traffic: the first op's parameter is ready a
// quarter of the way through backward, the second's at its end; the gradient sum after them
// runs interleaved and does not delay the last parameter.
TEST(StepTime, GradientsAreReadyWhenTheirOpsBackwardEnds) {
  StepCost c;
  c.samples = 8;
  KernelCost k;
  k.part = StepPart::kBackward;
  k.bytes = 1e9;
  c.kernels.push_back(k);
  c.grad_ready.push_back({1, 2});
  k.bytes = 3e9;
  c.kernels.push_back(k);
  c.grad_ready.push_back({2, 0});
  c.backward_end = 2;
  k.bytes = 1e9;
  c.kernels.push_back(k);  // a gradient sum
  const StepTime t = time_step(c, a100());
  ASSERT_EQ(t.grad_ready_s.size(), 3U);
  EXPECT_DOUBLE_EQ(t.grad_ready_s[0], t.micro_backward_s);
  EXPECT_EQ(t.grad_ready_s[1], -1);
  const double first = kernel_seconds(c.kernels[0], a100());
  const double both = first + kernel_seconds(c.kernels[1], a100());
  EXPECT_NEAR(t.grad_ready_s[2], t.micro_backward_s * first / both, 1e-15);
  EXPECT_DOUBLE_EQ(t.micro_backward_s, t.part(StepPart::kBackward));
  EXPECT_DOUBLE_EQ(t.compute_s, t.step_s);
}

TEST(StepTime, CommunicationAddsToTheStep) {
  StepTime t;
  t.samples = 32;
  t.compute_s = t.step_s = 0.1;
  t.flops = 1e12;
  CommTime c;
  c.exposed_s = 0.01;
  c.serial_s = 0.015;
  add_communication(t, c);
  EXPECT_DOUBLE_EQ(t.step_s, 0.125);
  EXPECT_DOUBLE_EQ(t.samples_per_s, 32 / 0.125);
  EXPECT_DOUBLE_EQ(t.achieved_flops_per_s, 1e12 / 0.125);
  EXPECT_DOUBLE_EQ(t.compute_s, 0.1);
}

TEST(StepTime, AnEpochIsWholeSteps) {
  StepTime t;
  t.samples = 32;
  t.step_s = 0.5;
  const EpochTime e = epoch_time(t, 1000);
  EXPECT_EQ(e.steps, 32);  // 31.25 rounded up
  EXPECT_DOUBLE_EQ(e.seconds, 16);
}

}  // namespace
}  // namespace trainfit
