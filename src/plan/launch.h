// trainfit launch: how to reproduce a baseline's effective batch on up to N GPUs. For each GPU
// count that divides the batch and each data-parallel strategy (DDP, ZeroRedundancyOptimizer,
// FSDP), the largest per-GPU batch that
// fits the card with the fewest micro-batches (per-GPU batch x GPUs x micro-batches = the
// baseline's batch, exactly); of those, the fastest optimizer step and the fewest GPU-seconds
// per step (report/launch_report.h adds the learning rate, the torchrun line and the code
// changes the run needs).
//
//   TrainingRequest r = ...;   // the model, its options and GPU; baseline_batch, baseline_lr
//   Result<LaunchPlan> plan = plan_launch(estimator, r, 4, true);
//   plan->candidates[*plan->fastest].per_gpu_batch;   // e.g. 8 per GPU over 4 GPUs, no
//   accumulation
//
// The step time includes the gradients' all-reduce that backward does not hide
// (estimate/collectives.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/estimator.h"

namespace trainfit {

// One GPU count and strategy: the largest per-GPU batch that fits, or the smallest tried.
struct LaunchCandidate {
  int gpus = 1;
  Strategy strategy = Strategy::kSingle;
  int64_t per_gpu_batch = 0;
  int grad_accum = 1;
  bool fits = false;
  TrainingRequest request;  // the configuration as a request
  Estimate estimate;        // of it
  double step_s = 0;        // one optimizer step, communication included
  double gpu_seconds() const { return gpus * step_s; }
};

struct LaunchPlan {
  int64_t baseline_batch = 0;
  std::vector<LaunchCandidate> candidates;  // GPU counts ascending, then strategies
  std::optional<size_t> fastest;            // into candidates: the least step time
  std::optional<size_t> cheapest;           // the fewest GPU-seconds per step
  TrainingRequest request;                  // the fastest as a request
  int estimates = 0;                        // estimates made
};

// `request` names the model, its training options, the GPU (and margin) and the baseline's
// batch; its batch, GPU count, strategy and accumulation are searched over 1 to `max_gpus` GPUs.
// ZeroRedundancyOptimizer is tried only for an optimizer with state (`stateful_optimizer`);
// FSDP (FULL_SHARD) only with `fsdp_wrap`, its units' module patterns (empty: the whole model).
Result<LaunchPlan> plan_launch(Estimator& estimator, const TrainingRequest& request, int max_gpus,
                               bool stateful_optimizer,
                               const std::optional<std::vector<std::string>>& fsdp_wrap = {});

}  // namespace trainfit
