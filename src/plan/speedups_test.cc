#include "plan/speedups.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "pipeline/estimator.h"

namespace trainfit {
namespace {

TrainingRequest resnet(Precision precision) {
  TrainingRequest r;
  r.model = "resnet50";
  r.batch = 64;
  r.precision = precision;
  r.device = cuda_profile(*find_gpu("h100-80gb"));
  return r;
}

StepTime now_of(const TrainingRequest& r) {
  return **predict_step_time(r);
}

TEST(Speedups, EachChangeIsPredictedAndRankedByItsGain) {
  const TrainingRequest r = resnet(Precision::kFp32);
  const StepTime now = now_of(r);
  const std::vector<Speedup> s = step_speedups(r, now);
  ASSERT_FALSE(s.empty());
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_GE(s[i].gain, kSpeedupThreshold) << s[i].change;
    EXPECT_NEAR(s[i].samples_per_s / now.samples_per_s - 1, s[i].gain, 1e-12);
    if (i > 0) EXPECT_GE(s[i - 1].gain, s[i].gain);
  }
  // bf16 autocast on Hopper is offered, at the step time the same model predicts for it.
  TrainingRequest amp = r;
  amp.precision = Precision::kAmpBf16;
  const auto bf16 =
      std::find_if(s.begin(), s.end(), [](const Speedup& x) { return x.change == "amp_bf16"; });
  ASSERT_NE(bf16, s.end());
  EXPECT_DOUBLE_EQ(bf16->step_s, now_of(amp).step_s);
  // Twice the batch is per sample: its step is longer.
  for (const Speedup& x : s) {
    if (x.change == "batch_x2") EXPECT_GT(x.step_s, now.step_s);
  }
}

TEST(Speedups, WhatIsAlreadyOnIsNotOfferedAgain) {
  TrainingRequest r = resnet(Precision::kAmpBf16);
  r.memory_format = MemoryFormat::kChannelsLast;
  const std::vector<Speedup> speedups = step_speedups(r, now_of(r));
  for (const Speedup& s : speedups) {
    EXPECT_NE(s.change, "amp_bf16");
    EXPECT_NE(s.change, "tf32");
    EXPECT_NE(s.change, "channels_last");
  }
}

TEST(Speedups, AStepThatWaitsForTheHostGainsFromCudaGraphs) {
  TrainingRequest r = resnet(Precision::kFp32);
  r.model = "resnet18";
  r.batch = 1;
  const StepTime now = now_of(r);
  ASSERT_GT(now.cpu_bound_s, 0.1 * now.step_s);
  const std::vector<Speedup> s = step_speedups(r, now);
  const auto graphs =
      std::find_if(s.begin(), s.end(), [](const Speedup& x) { return x.change == "host_free"; });
  ASSERT_NE(graphs, s.end());
  EXPECT_DOUBLE_EQ(graphs->step_s, now.gpu_only_s);
}

}  // namespace
}  // namespace trainfit
