#include "estimate/estimate.h"

#include <gtest/gtest.h>

#include <numeric>

#include "graph/device_rules.h"
#include "lower/lowering.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

Graph model(const std::string& name, int64_t batch, KernelTarget target) {
  ModelRequest r;
  r.name = name;
  r.batch = batch;
  r.options.target = target;
  return *build_model(r);
}

int64_t sum(const std::array<int64_t, kCategoryCount>& a) {
  return std::accumulate(a.begin(), a.end(), int64_t{0});
}

TEST(Estimate, CudaFiguresAreConsistent) {
  const Graph g = model("resnet50", 16, {Device::kCuda, TorchVersion::k2});
  EstimateOptions o;
  o.device = cuda_profile(*find_gpu("rtx4090"));
  o.explain = true;
  const Estimate e = *estimate(g, o);
  EXPECT_GE(e.peak_reserved_bytes, e.peak_allocated_bytes);
  EXPECT_EQ(e.device_used_bytes, e.peak_reserved_bytes + e.cuda_context_bytes);
  EXPECT_EQ(sum(e.breakdown), e.peak_allocated_bytes);
  EXPECT_EQ(e.allocator_cache_bytes, e.peak_reserved_bytes - e.peak_allocated_bytes);
  EXPECT_TRUE(e.fits);
  EXPECT_EQ(e.headroom_bytes, e.total_bytes - e.device_used_bytes);
  int64_t live = 0;
  for (const LiveTensor& t : e.live_at_peak) live += t.bytes;
  EXPECT_EQ(live, e.peak_allocated_bytes);
  int64_t activations = 0;
  for (const ModuleBytes& m : e.activations_by_module) activations += m.bytes;
  EXPECT_EQ(activations, e.breakdown[static_cast<size_t>(Category::kActivation)]);
}

// Note [Workspace bounds]: resnet50's convolutions on a card no recording covers are all
// unmeasured, so the estimate replays them at their bound too; at a batch the H100 recorded,
// all are measured and the bound is the central figure.
TEST(Estimate, UnmeasuredWorkspacesGiveABoundAboveTheCentralFigure) {
  EstimateOptions o;
  o.device = cuda_profile(*find_gpu("rtx4090"));
  const Graph g = model("resnet50", 32, o.device.target);
  const Estimate e = *estimate(g, o);
  const auto calls = [&](FigureSource s) { return e.workspace_calls[static_cast<size_t>(s)]; };
  // 53 convolutions: forward, backward-data (not the first's, whose input needs no gradient)
  // and backward-filter.
  EXPECT_EQ(calls(FigureSource::kRule), 53 * 3 - 1);
  EXPECT_EQ(calls(FigureSource::kMeasured), 0);
  EXPECT_EQ(e.unmeasured_workspace_calls(), 53 * 3 - 1);
  EXPECT_GT(e.peak_reserved_upper_bytes, e.peak_reserved_bytes);
  EXPECT_EQ(e.device_used_upper_bytes - e.device_used_bytes,
            e.peak_reserved_upper_bytes - e.peak_reserved_bytes);
  // The bound is the same events replayed with every unmeasured workspace at its bound.
  const EventList list =
      *lower_training_step(g, o.training,
                           {.cublas_workspace_bytes = o.device.cublas_workspace_bytes,
                            .cublaslt_workspace_bytes = cublaslt_workspace_bytes(),
                            .op_workspaces = true});
  int bounded = 0;
  for (const Buffer& b : list.buffers) {
    if (b.bound_bytes < 0) continue;
    ++bounded;
    EXPECT_EQ(b.category, Category::kWorkspace);
    EXPECT_TRUE(is_unmeasured(b.source));
    EXPECT_GE(b.bound_bytes, b.bytes);
  }
  EXPECT_EQ(bounded, 2 * (53 * 3 - 1));  // two iterations
  const Estimate central = *estimate_events(list, names_of(g), Estimate{}, o);
  const Estimate upper = *estimate_events(list, names_of(g), Estimate{}, o, /*at_bound=*/true);
  EXPECT_EQ(central.peak_reserved_bytes, e.peak_reserved_bytes);
  EXPECT_EQ(e.peak_reserved_upper_bytes,
            std::max(e.peak_reserved_bytes, upper.peak_reserved_bytes));
  EXPECT_GT(upper.peak_allocated_bytes, e.peak_allocated_bytes);  // its workspaces are larger

  EstimateOptions h100;
  h100.device = cuda_profile(*find_gpu("h100-80gb"));
  const Estimate measured = *estimate(model("resnet50", 32, h100.device.target), h100);
  EXPECT_EQ(measured.unmeasured_workspace_calls(), 0);
  EXPECT_EQ(measured.workspace_calls[static_cast<size_t>(FigureSource::kMeasured)], 53 * 3 - 1);
  EXPECT_EQ(measured.peak_reserved_upper_bytes, measured.peak_reserved_bytes);
  EXPECT_EQ(measured.device_used_upper_bytes, measured.device_used_bytes);
  // A batch the H100 did not record scales its recordings: unmeasured again.
  const Estimate scaled = *estimate(model("resnet50", 48, h100.device.target), h100);
  EXPECT_EQ(scaled.workspace_calls[static_cast<size_t>(FigureSource::kScaled)], 53 * 3 - 1);
  EXPECT_GE(scaled.peak_reserved_upper_bytes, scaled.peak_reserved_bytes);
}

TEST(Estimate, CpuProfileHasNoCache) {
  const Graph g = model("resnet18", 2, {Device::kCpu, TorchVersion::k1_13});
  EstimateOptions o;
  o.device = cpu_profile();
  const Estimate e = *estimate(g, o);
  EXPECT_EQ(e.peak_reserved_bytes, e.peak_allocated_bytes);
  EXPECT_EQ(e.cuda_context_bytes, 0);
}

TEST(Estimate, OutOfMemoryIsReportedWithWhatTheRunNeeds) {
  const Graph g = model("vgg16", 256, {Device::kCuda, TorchVersion::k2});
  EstimateOptions o;
  o.device = cuda_profile(*find_gpu("rtx3060"));
  const Estimate e = *estimate(g, o);
  EXPECT_FALSE(e.fits);
  ASSERT_TRUE(e.oom.has_value());
  EXPECT_GT(e.oom_numbers.requested, 0);
  EXPECT_GT(e.device_used_bytes, e.total_bytes);  // the unbounded run's needs
}

TEST(Estimate, TimelineHasOnePointPerDeviceEvent) {
  const Graph g = model("resnet18", 2, {Device::kCuda, TorchVersion::k2});
  EstimateOptions o;
  o.timeline = true;
  const Estimate e = *estimate(g, o);
  ASSERT_FALSE(e.timeline.empty());
  EXPECT_LE(e.timeline.size(), e.events);
  int64_t max_allocated = 0;
  for (const TimelinePoint& p : e.timeline) max_allocated = std::max(max_allocated, p.allocated);
  EXPECT_EQ(max_allocated, e.peak_allocated_bytes);
}

TEST(Estimate, GpuCatalog) {
  EXPECT_EQ(find_gpu("h100-80gb")->sm, 90);
  EXPECT_EQ(cublas_workspace_bytes(90), 32 << 20);
  EXPECT_EQ(cublas_workspace_bytes(86), 8'519'680);
  const Status s = find_gpu("rtx9090").status();
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_NE(s.hint().find("rtx4090"), std::string::npos);
}

// The datasheet peaks hold together: the FP32 figure is 2 x SMs x lanes x clock (within 1%, the
// datasheets round), tensor math is no slower than CUDA cores, TF32 exists from sm80 on, and
// a card's figures are all set.
TEST(Estimate, GpuCatalogPeaksAreConsistent) {
  for (const GpuSpec& g : gpu_catalog()) {
    const GpuPeaks& p = g.peaks;
    SCOPED_TRACE(std::string(g.name));
    ASSERT_GT(p.sm_count, 0);
    const double fp32 = 2.0 * p.sm_count * p.fp32_lanes_per_sm * p.boost_mhz * 1e6 / 1e12;
    EXPECT_NEAR(p.fp32_tflops / fp32, 1.0, 0.01) << fp32;
    EXPECT_GE(p.fp16_tflops, p.fp32_tflops);
    EXPECT_EQ(p.tf32_tflops > 0, g.sm >= 80);
    if (p.tf32_tflops > 0) {
      EXPECT_GE(p.tf32_tflops, p.fp32_tflops);
      EXPECT_NEAR(p.tf32_tflops * 2 / p.fp16_tflops, 1.0, 0.01);  // TF32 runs at half the rate
    }
    EXPECT_GT(p.bandwidth_gbps, 0);
    EXPECT_GE(p.l2_bytes, int64_t{3} << 20);
  }
  EXPECT_DOUBLE_EQ(find_gpu("rtx4090")->peaks.fp16_tflops, 165.2);
}

}  // namespace
}  // namespace trainfit
