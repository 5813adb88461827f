// The step time of a data-parallel run: each GPU's compute plus the communication backward
// does not hide, the same whether it comes with the memory estimate or alone (fit's path).
#include <gtest/gtest.h>

#include "pipeline/estimator.h"

namespace trainfit {
namespace {

TrainingRequest resnet50(int gpus) {
  TrainingRequest r;
  r.model = "resnet50";
  r.batch = 64;
  r.optimizer = OptimizerKind::kMomentum;
  r.gpus = gpus;
  r.device = cuda_profile(*find_gpu("rtx4090"));
  return r;
}

TEST(DataParallelTime, OneGpuHasNoCommunication) {
  PipelineEstimator estimator;
  const Result<Estimate> e = estimator.estimate(resnet50(1));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_TRUE(e->time);
  EXPECT_FALSE(e->time->comm);
  EXPECT_DOUBLE_EQ(e->time->step_s, e->time->compute_s);
}

TEST(DataParallelTime, TheAllReduceOfEveryGradientBucketIsCounted) {
  PipelineEstimator estimator;
  const Result<Estimate> one = estimator.estimate(resnet50(1));
  const Result<Estimate> four = estimator.estimate(resnet50(4));
  ASSERT_TRUE(one.ok() && four.ok());
  ASSERT_TRUE(four->time && four->time->comm && four->ddp);
  const StepTime& t = *four->time;
  const CommTime& c = *t.comm;
  // Each GPU computes what one GPU computes alone; communication comes on top.
  EXPECT_DOUBLE_EQ(t.compute_s, one->time->step_s);
  EXPECT_DOUBLE_EQ(t.step_s, t.compute_s + c.added_s());
  EXPECT_GT(c.exposed_s, 0);  // the first layers' gradients are ready only as backward ends
  EXPECT_LT(c.exposed_s, c.all_reduce_s);
  // The steady state's buckets are the rebuilt ones the memory model allocates.
  ASSERT_EQ(c.buckets.size(), four->ddp->rebuilt.size());
  for (size_t i = 0; i < c.buckets.size(); ++i) {
    EXPECT_EQ(c.buckets[i].bytes, four->ddp->rebuilt[i].bytes);
    EXPECT_LE(c.buckets[i].ready_s, t.micro_backward_s);
    if (i > 0) {
      EXPECT_GE(c.buckets[i].start_s, c.buckets[i - 1].end_s);
    }
  }
  EXPECT_DOUBLE_EQ(c.buckets.back().ready_s, t.micro_backward_s);
  // The step time alone (fit's and launch's path) lowers for the layout and agrees.
  const Result<std::optional<StepTime>> alone = predict_step_time(resnet50(4));
  ASSERT_TRUE(alone.ok() && alone->has_value());
  EXPECT_DOUBLE_EQ((*alone)->step_s, t.step_s);
}

TEST(DataParallelTime, ASlowerLinkExposesMore) {
  PipelineEstimator estimator;
  TrainingRequest r = resnet50(4);
  const Result<Estimate> pcie4 = estimator.estimate(r);
  r.device.timing->link = link_of(LinkKind::kPcie3);
  const Result<Estimate> pcie3 = estimator.estimate(r);
  r.device.timing->link.bus_gbps = 1;
  const Result<Estimate> slow = estimator.estimate(r);
  ASSERT_TRUE(pcie4.ok() && pcie3.ok() && slow.ok());
  EXPECT_LT(pcie4->time->step_s, pcie3->time->step_s);
  EXPECT_LT(pcie3->time->step_s, slow->time->step_s);
  // At 1 GB/s the all-reduce (1.5 x 97.5 MiB, 153 ms) is longer than backward: backward can
  // hide at most its own length of it.
  const StepTime& s = *slow->time;
  EXPECT_GT(s.comm->all_reduce_s, s.micro_backward_s);
  EXPECT_GE(s.comm->exposed_s, s.comm->all_reduce_s - s.micro_backward_s);
  // Memory does not depend on the link.
  EXPECT_EQ(pcie4->peak_allocated_bytes, slow->peak_allocated_bytes);
}

// Two nodes of 4 A100s behind 100 Gbit/s NICs train as 8 ranks on a 12.5 GB/s ring: the same
// step as one node of 8 whose link carries 12.5 GB/s, and the same per-rank memory.
TEST(DataParallelTime, AcrossNodesTheNetworkBoundsTheRing) {
  PipelineEstimator estimator;
  TrainingRequest two = resnet50(4);
  two.device = cuda_profile(*find_gpu("a100-80gb"));
  two.nodes = 2;
  TrainingRequest one = two;
  one.nodes = 1;
  one.gpus = 8;
  one.device.timing->link.bus_gbps = 12.5;
  const Result<Estimate> a = estimator.estimate(two);
  const Result<Estimate> b = estimator.estimate(one);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
  EXPECT_EQ(a->time->comm->ranks, 8);
  EXPECT_DOUBLE_EQ(a->time->comm->bus_gbps, 12.5);
  EXPECT_DOUBLE_EQ(a->time->comm->link.bus_gbps, 200);
  EXPECT_DOUBLE_EQ(a->time->step_s, b->time->step_s);
  EXPECT_EQ(a->peak_allocated_bytes, b->peak_allocated_bytes);
  // 800 Gbit/s (100 GB/s) is still below NVLink 3's 200: it bounds the ring.
  two.network_gbits = 800;
  const Result<Estimate> fast = estimator.estimate(two);
  ASSERT_TRUE(fast.ok());
  EXPECT_DOUBLE_EQ(fast->time->comm->bus_gbps, 100);
  EXPECT_LT(fast->time->step_s, a->time->step_s);
}

TEST(DataParallelTime, ZeroRedundancyBroadcastsTheUpdatedParameters) {
  PipelineEstimator estimator;
  TrainingRequest r = resnet50(4);
  const Result<Estimate> ddp = estimator.estimate(r);
  r.strategy = Strategy::kZero1;
  const Result<Estimate> zero = estimator.estimate(r);
  ASSERT_TRUE(ddp.ok() && zero.ok());
  // Every parameter (97.5 MiB) crosses the link once more after the step, one call each.
  const double broadcast = zero->time->comm->serial_s - ddp->time->comm->serial_s;
  EXPECT_GT(broadcast, 97.5 * (1 << 20) / 24.5e9);
  EXPECT_DOUBLE_EQ(zero->time->comm->exposed_s, ddp->time->comm->exposed_s);
}

}  // namespace
}  // namespace trainfit
