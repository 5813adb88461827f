// Batch and learning rate over GPUs: the effective batch a data-parallel run trains with, what
// reaches the batch a paper or config trained with (the baseline), the learning rate under the
// rule that fits the optimizer, and what DistributedSampler and BatchNorm do at this split.
//
//   ScalingInput in{.per_gpu_batch = 2, .gpus = 2, .optimizer = OptimizerKind::kAdamW,
//                   .baseline_batch = 8, .baseline_lr = 2e-3};
//   ScalingPlan plan = plan_scaling(in);
//   plan.effective_batch;  // 4: 2 per GPU x 2 GPUs x 1 micro-batch
//   plan.lr;               // 1.41e-3: the square-root rule for Adam, k = 4 / 8
//   plan.warnings;         // effective_batch_differs: --grad-accum 2 reaches 8
//
// The rules, each with its source and conditions:
// - linear, for SGD (with or without momentum): lr x k, reaching a larger batch through a
//   gradual warm-up of 5 epochs from the baseline's rate (Goyal et al. 2017, arXiv:1706.02677,
//   ResNet-50 on ImageNet to a batch of 8k);
// - square root, for Adam and AdamW: lr x sqrt(k), with 1 - beta1, 1 - beta2 scaled by k and
//   eps divided by sqrt(k) (Malladi et al. 2022, arXiv:2205.10287, an SDE argument that holds
//   while k (1 - beta) stays well below 1);
// where k = effective batch / baseline batch. Either way the baseline's schedule is measured in
// epochs, not steps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "estimate/step_time.h"
#include "lower/training.h"

namespace trainfit {

enum class LrRule : uint8_t { kSame, kLinear, kSquareRoot };
inline constexpr auto kLrRuleNames = enum_names<LrRule>({
    {LrRule::kSame, "same"},
    {LrRule::kLinear, "linear"},
    {LrRule::kSquareRoot, "sqrt"},
});
inline std::string_view lr_rule_name(LrRule r) {
  return kLrRuleNames.name(r);
}

struct ScalingInput {
  int64_t per_gpu_batch = 1;
  int gpus = 1;
  int grad_accum = 1;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  std::optional<int64_t> baseline_batch;  // the batch the paper or config trained with
  std::optional<double> baseline_lr;      // its learning rate
  std::optional<int64_t> dataset_size;    // samples per epoch
  int batch_norm_layers = 0;              // layers that normalise over the batch (BatchNorm*d)
};

struct ScalingWarning {
  std::string code;     // stable: effective_batch_differs, batchnorm_small_batch, ...
  std::string message;  // what happens, with the numbers
  std::string fix;      // what to change
};

struct ScalingPlan {
  int64_t effective_batch = 0;  // per-GPU batch x GPUs x micro-batches per step
  // With a baseline batch: the micro-batches per step that reach it at this per-GPU batch and
  // GPU count (nullopt when none does exactly), and the per-GPU batch that reaches it with
  // this accumulation.
  std::optional<int> grad_accum_for_baseline;
  std::optional<int64_t> per_gpu_batch_for_baseline;
  // With a baseline learning rate.
  double batch_ratio = 1;  // k = effective / baseline
  LrRule rule = LrRule::kSame;
  std::optional<double> lr;         // under `rule`
  std::optional<double> lr_linear;  // lr x k and lr x sqrt(k): the range note 003 searches
  std::optional<double> lr_sqrt;
  std::string rule_source;  // the paper and its conditions
  // The square-root rule's companions for Adam at PyTorch's defaults (0.9, 0.999, 1e-8).
  std::optional<double> beta1, beta2, eps;
  // The linear rule's warm-up toward a larger batch: 5 epochs, and in optimizer steps with a
  // dataset size.
  std::optional<double> warmup_epochs;
  std::optional<int64_t> warmup_steps;
  // With a dataset size: what DistributedSampler gives each rank, and the optimizer steps of
  // one epoch (the last one counted as full).
  std::optional<SamplerSplit> sampler;
  std::optional<int64_t> steps_per_epoch;
  std::vector<ScalingWarning> warnings;
};

ScalingPlan plan_scaling(const ScalingInput& in);

// Per-GPU batch below which BatchNorm's statistics cost accuracy: in Wu and He (2018,
// arXiv:1803.08494) ResNet-50's ImageNet error with BatchNorm is 23.6% at 32 and 23.7% at 16
// images per GPU, then 24.8% at 8, 27.3% at 4 and 34.7% at 2, while GroupNorm stays at 24.0-24.2%.
inline constexpr int64_t kBatchNormMinBatch = 16;

}  // namespace trainfit
