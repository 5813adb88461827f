#include "plan/launch.h"

#include <gtest/gtest.h>

#include "plan/fake_estimator_test_util.h"

namespace trainfit {
namespace {

// The fake fits 512 but not 1024 samples per GPU on 24 GiB (5% kept free), and a step takes
// 1 ms per sample on each GPU: more GPUs are faster, and every plan costs the same GPU-seconds.
TEST(Launch, ReachesTheBaselineExactlyWithTheFewestMicroBatches) {
  FakeEstimator fake;
  TrainingRequest r = fake.request(24 * kGiB);
  r.baseline_batch = 2048;
  const Result<LaunchPlan> plan = plan_launch(fake, r, 4, true);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // 1 GPU: 512 x 4; 2 GPUs: 512 x 2 (ddp and zero1); 3 does not divide 2048; 4 GPUs: 512 x 1.
  ASSERT_EQ(plan->candidates.size(), 5U);
  for (const LaunchCandidate& c : plan->candidates) {
    SCOPED_TRACE(c.gpus);
    EXPECT_TRUE(c.fits);
    EXPECT_EQ(c.per_gpu_batch * c.gpus * c.grad_accum, 2048);
    EXPECT_EQ(c.per_gpu_batch, 512);
    TrainingRequest at = r;
    at.batch = c.per_gpu_batch;
    EXPECT_TRUE(fake.fits(at));
    at.batch = c.per_gpu_batch * 2;  // the next per-GPU batch the search tried
    EXPECT_FALSE(fake.fits(at));
  }
  EXPECT_EQ(plan->candidates[1].strategy, Strategy::kDdp);
  EXPECT_EQ(plan->candidates[2].strategy, Strategy::kZero1);
  const LaunchCandidate& fastest = plan->candidates[*plan->fastest];
  EXPECT_EQ(fastest.gpus, 4);
  EXPECT_EQ(fastest.grad_accum, 1);
  EXPECT_DOUBLE_EQ(fastest.step_s, 0.512);
  // The same GPU-seconds everywhere: the fewest GPUs.
  EXPECT_EQ(plan->candidates[*plan->cheapest].gpus, 1);
  EXPECT_EQ(plan->request.batch, 512);
  EXPECT_EQ(plan->request.gpus, 4);
  EXPECT_EQ(plan->request.strategy, Strategy::kDdp);
}

TEST(Launch, SgdWithoutStateSkipsZeroRedundancy) {
  FakeEstimator fake;
  TrainingRequest r = fake.request(24 * kGiB);
  r.baseline_batch = 64;
  const Result<LaunchPlan> plan = plan_launch(fake, r, 2, false);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_EQ(plan->candidates.size(), 2U);
  EXPECT_EQ(plan->candidates[1].strategy, Strategy::kDdp);
}

TEST(Launch, NothingFitsIsAPlanWithoutAChoice) {
  FakeEstimator fake;
  fake.fixed_bytes = 30 * kGiB;  // the model alone is more than the card
  TrainingRequest r = fake.request(24 * kGiB);
  r.baseline_batch = 8;
  const Result<LaunchPlan> plan = plan_launch(fake, r, 2, true);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_FALSE(plan->fastest);
  EXPECT_FALSE(plan->cheapest);
  for (const LaunchCandidate& c : plan->candidates) {
    EXPECT_FALSE(c.fits);
    EXPECT_EQ(c.per_gpu_batch, 1);  // down to one sample per GPU
  }
}

TEST(Launch, BadInputIsRefused) {
  FakeEstimator fake;
  TrainingRequest r = fake.request(24 * kGiB);
  EXPECT_FALSE(plan_launch(fake, r, 2, true).ok());  // no baseline batch
  r.baseline_batch = 7;
  EXPECT_FALSE(plan_launch(fake, r, 0, true).ok());
  // Of 1 to 6 GPUs only one divides 7.
  const Result<LaunchPlan> plan = plan_launch(fake, r, 6, true);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->candidates.size(), 1U);
}

}  // namespace
}  // namespace trainfit
