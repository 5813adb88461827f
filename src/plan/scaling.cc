#include "plan/scaling.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "base/size_math.h"

namespace trainfit {
namespace {

// PyTorch's Adam and AdamW defaults, which the square-root rule adjusts.
constexpr double kAdamBeta1 = 0.9;
constexpr double kAdamBeta2 = 0.999;
constexpr double kAdamEps = 1e-8;
constexpr double kWarmupEpochs = 5;  // Goyal et al.'s gradual warm-up

bool adam_family(OptimizerKind k) {
  return k != OptimizerKind::kSgd && k != OptimizerKind::kMomentum;
}

std::string batch_product(const ScalingInput& in) {
  std::string s =
      fmt::format("{} per GPU x {} GPU{}", in.per_gpu_batch, in.gpus, in.gpus == 1 ? "" : "s");
  if (in.grad_accum > 1) s += fmt::format(" x {} micro-batches", in.grad_accum);
  return s;
}

// The baseline's batch not reached: what reaches it, and note 003's trap (the baseline's whole
// batch given to each GPU).
ScalingWarning batch_differs(const ScalingInput& in, const ScalingPlan& plan, int64_t baseline) {
  ScalingWarning w{"effective_batch_differs",
                   fmt::format("{} = {} samples per optimizer step; the baseline trained with {}",
                               batch_product(in), plan.effective_batch, baseline),
                   ""};
  if (in.gpus > 1 && in.per_gpu_batch == baseline) {
    w.message +=
        fmt::format(" (--batch is per GPU: {} GPUs at the baseline's batch train with {}x it)",
                    in.gpus, in.gpus * in.grad_accum);
  }
  std::vector<std::string> fixes;
  if (plan.per_gpu_batch_for_baseline && *plan.per_gpu_batch_for_baseline != in.per_gpu_batch) {
    fixes.push_back(fmt::format("--batch {} (per GPU)", *plan.per_gpu_batch_for_baseline));
  }
  if (plan.grad_accum_for_baseline && *plan.grad_accum_for_baseline != in.grad_accum) {
    fixes.push_back(fmt::format("--grad-accum {}", *plan.grad_accum_for_baseline));
  }
  w.fix =
      fixes.empty()
          ? fmt::format("choose a per-GPU batch and --grad-accum whose product with {} GPUs is {}",
                        in.gpus, baseline)
          : fmt::format("{} reaches {}", fmt::join(fixes, ", or "), baseline);
  if (in.baseline_lr) w.fix += "; or keep this batch at the scaled learning rate";
  return w;
}

void plan_learning_rate(const ScalingInput& in, double base, ScalingPlan& plan) {
  const double k = plan.batch_ratio;
  plan.lr_linear = base * k;
  plan.lr_sqrt = base * std::sqrt(k);
  if (k == 1) {
    plan.rule = LrRule::kSame;
    plan.lr = base;
    plan.rule_source = "the baseline's batch: its learning rate as it is";
    return;
  }
  if (!adam_family(in.optimizer)) {
    plan.rule = LrRule::kLinear;
    plan.lr = plan.lr_linear;
    plan.rule_source =
        "linear scaling for SGD (Goyal et al. 2017, arXiv:1706.02677): lr x k, with a gradual "
        "warm-up of 5 epochs toward a larger batch; matched the baseline's ImageNet accuracy "
        "up to a batch of 8k";
    if (k > 1) plan.warmup_epochs = kWarmupEpochs;
    return;
  }
  plan.rule = LrRule::kSquareRoot;
  plan.lr = plan.lr_sqrt;
  plan.rule_source =
      "square-root scaling for Adam (Malladi et al. 2022, arXiv:2205.10287): lr x sqrt(k), "
      "1 - beta1 and 1 - beta2 times k, eps / sqrt(k); an SDE argument that holds while "
      "k (1 - beta) stays well below 1";
  const double beta1 = 1 - k * (1 - kAdamBeta1);
  if (beta1 <= 0) {
    plan.warnings.push_back(
        {"lr_rule_out_of_range",
         fmt::format("k = {:.3g} takes Adam's beta1 to {:.3g}: the square-root rule does not "
                     "reach that far",
                     k, beta1),
         "bring the effective batch nearer the baseline's (--grad-accum), or tune the "
         "learning rate and warm-up at this batch"});
    return;
  }
  plan.beta1 = beta1;
  plan.beta2 = 1 - k * (1 - kAdamBeta2);
  plan.eps = kAdamEps / std::sqrt(k);
}

void batch_norm_warning(const ScalingInput& in, ScalingPlan& plan) {
  if (in.batch_norm_layers == 0 || in.per_gpu_batch >= kBatchNormMinBatch) return;
  ScalingWarning w{
      "batchnorm_small_batch",
      fmt::format("{} BatchNorm layer{} normalise over {} sample{} per GPU; ResNet-50's ImageNet "
                  "error with BatchNorm is 23.7% at 16 per GPU, 24.8% at 8, 27.3% at 4 and "
                  "34.7% at 2 (Wu and He 2018)",
                  in.batch_norm_layers, in.batch_norm_layers == 1 ? "" : "s", in.per_gpu_batch,
                  in.per_gpu_batch == 1 ? "" : "s"),
      ""};
  const int64_t synced = in.per_gpu_batch * in.gpus;
  if (in.gpus > 1 && synced >= kBatchNormMinBatch) {
    w.fix = fmt::format(
        "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before wrapping it in "
        "DDP: statistics over {} samples",
        synced);
  } else {
    w.fix = fmt::format(
        "GroupNorm (nn.GroupNorm(32, C)) in place of BatchNorm: its error does not depend on "
        "the batch{}; gradient accumulation does not enlarge BatchNorm's batch",
        in.gpus > 1 ? fmt::format(" (SyncBatchNorm would reach only {})", synced) : "");
  }
  plan.warnings.push_back(std::move(w));
}

void sampler_warnings(const ScalingInput& in, ScalingPlan& plan) {
  if (in.gpus == 1) return;
  if (plan.sampler && plan.sampler->padded_samples > 0) {
    const SamplerSplit& s = *plan.sampler;
    plan.warnings.push_back(
        {"sampler_padding",
         fmt::format("{} samples do not split over {} GPUs: DistributedSampler repeats {} of "
                     "them each epoch so that every rank gets {}",
                     *in.dataset_size, in.gpus, s.padded_samples, s.samples_per_rank),
         fmt::format("DistributedSampler(..., drop_last=True) drops {} instead; when evaluating, "
                     "reduce sums and counts over the ranks (dist.all_reduce) and expect the "
                     "repeated samples in them",
                     distributed_sampler_split(*in.dataset_size, in.gpus, true).dropped_samples)});
  }
  plan.warnings.push_back(
      {"sampler_set_epoch",
       "DistributedSampler shuffles with seed + epoch: without set_epoch every epoch sees the "
       "same order",
       "call sampler.set_epoch(epoch) at the start of every epoch"});
}

}  // namespace

ScalingPlan plan_scaling(const ScalingInput& in) {
  ScalingPlan plan;
  const int64_t per_step = in.per_gpu_batch * in.gpus;
  plan.effective_batch = per_step * in.grad_accum;
  if (in.dataset_size) {
    plan.sampler = distributed_sampler_split(*in.dataset_size, in.gpus, false);
    plan.steps_per_epoch =
        ceil_div(plan.sampler->samples_per_rank, in.per_gpu_batch * int64_t{in.grad_accum});
  }
  if (in.baseline_batch) {
    const int64_t b = *in.baseline_batch;
    if (b % per_step == 0) plan.grad_accum_for_baseline = static_cast<int>(b / per_step);
    const int64_t ranks_steps = int64_t{in.gpus} * in.grad_accum;
    if (b % ranks_steps == 0) plan.per_gpu_batch_for_baseline = b / ranks_steps;
    plan.batch_ratio = static_cast<double>(plan.effective_batch) / static_cast<double>(b);
    if (plan.effective_batch != b) plan.warnings.push_back(batch_differs(in, plan, b));
    if (in.baseline_lr) plan_learning_rate(in, *in.baseline_lr, plan);
    if (plan.warmup_epochs && plan.steps_per_epoch) {
      plan.warmup_steps = static_cast<int64_t>(
          std::ceil(*plan.warmup_epochs * static_cast<double>(*plan.steps_per_epoch)));
    }
  }
  batch_norm_warning(in, plan);
  sampler_warnings(in, plan);
  return plan;
}

}  // namespace trainfit
