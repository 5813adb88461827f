#include "plan/scaling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace trainfit {
namespace {

const ScalingWarning* find_warning(const ScalingPlan& plan, const std::string& code) {
  auto it = std::find_if(plan.warnings.begin(), plan.warnings.end(),
                         [&](const ScalingWarning& w) { return w.code == code; });
  return it == plan.warnings.end() ? nullptr : &*it;
}

// Note 003's trap: the baseline's batch of 4 given to each of two GPUs trains with 8.
TEST(Scaling, BaselineBatchPerGpuIsTwiceTheBaselineOnTwoGpus) {
  const ScalingPlan plan = plan_scaling({.per_gpu_batch = 4, .gpus = 2, .baseline_batch = 4});
  EXPECT_EQ(plan.effective_batch, 8);
  EXPECT_EQ(plan.per_gpu_batch_for_baseline, 2);
  EXPECT_FALSE(plan.grad_accum_for_baseline);  // 4 is not a multiple of 8
  const ScalingWarning* w = find_warning(plan, "effective_batch_differs");
  ASSERT_NE(w, nullptr);
  EXPECT_NE(w->message.find("4 per GPU x 2 GPUs = 8"), std::string::npos) << w->message;
  EXPECT_NE(w->message.find("--batch is per GPU"), std::string::npos) << w->message;
  EXPECT_NE(w->fix.find("--batch 2 (per GPU)"), std::string::npos) << w->fix;
  EXPECT_FALSE(plan.lr);  // no baseline learning rate given
}

TEST(Scaling, AccumulationThatReachesTheBaseline) {
  const ScalingPlan plan = plan_scaling({.per_gpu_batch = 8, .gpus = 4, .baseline_batch = 256});
  EXPECT_EQ(plan.effective_batch, 32);
  EXPECT_EQ(plan.grad_accum_for_baseline, 8);
  EXPECT_EQ(plan.per_gpu_batch_for_baseline, 64);
  const ScalingWarning* w = find_warning(plan, "effective_batch_differs");
  ASSERT_NE(w, nullptr);
  EXPECT_NE(w->fix.find("--grad-accum 8"), std::string::npos) << w->fix;
}

TEST(Scaling, SameBatchKeepsTheLearningRate) {
  const ScalingPlan plan = plan_scaling({.per_gpu_batch = 32,
                                         .gpus = 4,
                                         .grad_accum = 2,
                                         .optimizer = OptimizerKind::kMomentum,
                                         .baseline_batch = 256,
                                         .baseline_lr = 0.1});
  EXPECT_EQ(plan.effective_batch, 256);
  EXPECT_EQ(plan.rule, LrRule::kSame);
  EXPECT_DOUBLE_EQ(*plan.lr, 0.1);
  EXPECT_FALSE(plan.warmup_epochs);
  EXPECT_EQ(find_warning(plan, "effective_batch_differs"), nullptr);
}

// Goyal et al.: SGD at k times the batch takes k times the rate after 5 epochs of warm-up.
TEST(Scaling, SgdScalesLinearlyWithWarmup) {
  const ScalingPlan plan = plan_scaling({.per_gpu_batch = 32,
                                         .gpus = 8,
                                         .grad_accum = 4,
                                         .optimizer = OptimizerKind::kMomentum,
                                         .baseline_batch = 256,
                                         .baseline_lr = 0.1,
                                         .dataset_size = 1281167});
  EXPECT_EQ(plan.effective_batch, 1024);
  EXPECT_EQ(plan.rule, LrRule::kLinear);
  EXPECT_DOUBLE_EQ(plan.batch_ratio, 4);
  EXPECT_DOUBLE_EQ(*plan.lr, 0.4);
  EXPECT_DOUBLE_EQ(*plan.lr_sqrt, 0.2);
  // ImageNet's 1,281,167 images over 8 ranks: 160,146 each (one padded), 1,252 steps of 128.
  EXPECT_EQ(plan.sampler->samples_per_rank, 160146);
  EXPECT_EQ(plan.sampler->padded_samples, 1);
  EXPECT_EQ(plan.steps_per_epoch, 1252);
  EXPECT_EQ(plan.warmup_epochs, 5);
  EXPECT_EQ(plan.warmup_steps, 5 * 1252);
  EXPECT_FALSE(plan.beta1);
}

// Malladi et al.: Adam at k times the batch: lr sqrt(k), 1 - beta times k, eps / sqrt(k).
TEST(Scaling, AdamScalesBySquareRootWithBetasAndEps) {
  const ScalingPlan plan = plan_scaling({.per_gpu_batch = 16,
                                         .gpus = 2,
                                         .optimizer = OptimizerKind::kAdamW,
                                         .baseline_batch = 64,
                                         .baseline_lr = 1e-4});
  EXPECT_DOUBLE_EQ(plan.batch_ratio, 0.5);
  EXPECT_EQ(plan.rule, LrRule::kSquareRoot);
  EXPECT_NEAR(*plan.lr, 1e-4 * std::sqrt(0.5), 1e-15);
  EXPECT_DOUBLE_EQ(*plan.lr_linear, 5e-5);
  EXPECT_NEAR(*plan.beta1, 0.95, 1e-12);
  EXPECT_NEAR(*plan.beta2, 0.9995, 1e-12);
  EXPECT_NEAR(*plan.eps, 1e-8 / std::sqrt(0.5), 1e-20);
  EXPECT_FALSE(plan.warmup_epochs);  // a smaller batch needs no warm-up
}

TEST(Scaling, SquareRootRuleRefusesBetasBeyondItsRange) {
  const ScalingPlan plan = plan_scaling({.per_gpu_batch = 64,
                                         .gpus = 4,
                                         .optimizer = OptimizerKind::kAdam,
                                         .baseline_batch = 16,
                                         .baseline_lr = 1e-3});
  EXPECT_DOUBLE_EQ(plan.batch_ratio, 16);
  EXPECT_NEAR(*plan.lr, 4e-3, 1e-15);
  EXPECT_FALSE(plan.beta1);  // 1 - 16 x 0.1 < 0
  EXPECT_NE(find_warning(plan, "lr_rule_out_of_range"), nullptr);
}

TEST(Scaling, SmallBatchNormBatchSuggestsSyncBatchNormOrGroupNorm) {
  ScalingPlan plan = plan_scaling({.per_gpu_batch = 4, .gpus = 4, .batch_norm_layers = 53});
  const ScalingWarning* w = find_warning(plan, "batchnorm_small_batch");
  ASSERT_NE(w, nullptr);
  EXPECT_NE(w->message.find("53 BatchNorm layers normalise over 4 samples"), std::string::npos);
  EXPECT_NE(w->fix.find("SyncBatchNorm.convert_sync_batchnorm"), std::string::npos);
  EXPECT_NE(w->fix.find("over 16 samples"), std::string::npos) << w->fix;

  plan = plan_scaling({.per_gpu_batch = 4, .gpus = 2, .batch_norm_layers = 53});
  w = find_warning(plan, "batchnorm_small_batch");
  ASSERT_NE(w, nullptr);
  EXPECT_NE(w->fix.find("GroupNorm"), std::string::npos);
  EXPECT_NE(w->fix.find("SyncBatchNorm would reach only 8"), std::string::npos) << w->fix;

  EXPECT_EQ(find_warning(plan_scaling({.per_gpu_batch = 16, .gpus = 2, .batch_norm_layers = 53}),
                         "batchnorm_small_batch"),
            nullptr);
  EXPECT_EQ(find_warning(plan_scaling({.per_gpu_batch = 2, .gpus = 2}), "batchnorm_small_batch"),
            nullptr);  // no BatchNorm
}

TEST(Scaling, DistributedSamplerPadsOrDrops) {
  SamplerSplit s = distributed_sampler_split(10, 4, false);
  EXPECT_EQ(s.samples_per_rank, 3);
  EXPECT_EQ(s.padded_samples, 2);
  s = distributed_sampler_split(10, 4, true);
  EXPECT_EQ(s.samples_per_rank, 2);
  EXPECT_EQ(s.dropped_samples, 2);
  s = distributed_sampler_split(12, 4, true);
  EXPECT_EQ(s.samples_per_rank, 3);
  EXPECT_EQ(s.dropped_samples, 0);

  const ScalingPlan plan = plan_scaling({.per_gpu_batch = 2, .gpus = 4, .dataset_size = 10});
  const ScalingWarning* w = find_warning(plan, "sampler_padding");
  ASSERT_NE(w, nullptr);
  EXPECT_NE(w->message.find("repeats 2"), std::string::npos) << w->message;
  EXPECT_NE(w->fix.find("drops 2"), std::string::npos) << w->fix;
  EXPECT_NE(find_warning(plan, "sampler_set_epoch"), nullptr);
  EXPECT_EQ(plan.steps_per_epoch, 2);  // 3 samples in batches of 2
}

TEST(Scaling, OneGpuHasNoSamplerWarnings) {
  const ScalingPlan plan =
      plan_scaling({.per_gpu_batch = 8, .baseline_batch = 8, .dataset_size = 10});
  EXPECT_TRUE(plan.warnings.empty());
  EXPECT_EQ(plan.sampler->padded_samples, 0);
}

}  // namespace
}  // namespace trainfit
