#include "plan/launch.h"

#include <fmt/format.h>

#include <algorithm>

#include "plan/batch_search.h"

namespace trainfit {
namespace {

// The strategies worth comparing on `gpus` GPUs: ZeroRedundancyOptimizer only shards state
// that exists.
std::vector<Strategy> strategies(int gpus, bool stateful, std::optional<Strategy> asked,
                                 bool fsdp) {
  if (gpus == 1) return {Strategy::kSingle};
  if (asked && *asked != Strategy::kSingle) return {*asked};
  std::vector<Strategy> out = {Strategy::kDdp};
  if (stateful) out.push_back(Strategy::kZero1);
  if (fsdp) out.push_back(Strategy::kFsdp);
  return out;
}

bool better(const LaunchCandidate& a, const LaunchCandidate& b, bool by_gpu_seconds) {
  const double ta = by_gpu_seconds ? a.gpu_seconds() : a.step_s;
  const double tb = by_gpu_seconds ? b.gpu_seconds() : b.step_s;
  if (ta != tb) return ta < tb;
  return a.gpus < b.gpus;  // the same time on fewer GPUs
}

}  // namespace

Result<LaunchPlan> plan_launch(Estimator& estimator, const TrainingRequest& request, int max_gpus,
                               bool stateful_optimizer,
                               const std::optional<std::vector<std::string>>& fsdp_wrap) {
  if (!request.baseline_batch) {
    return invalid_argument("launch needs the baseline's effective batch",
                            "add --baseline-batch B (the batch the paper or config trained with)");
  }
  if (max_gpus < 1 || max_gpus > 4096) {
    return invalid_argument(fmt::format("--gpus {} is outside 1 to 4096", max_gpus),
                            "give the GPUs the node has, e.g. --gpus 4");
  }
  LaunchPlan plan;
  plan.baseline_batch = *request.baseline_batch;
  TrainingRequest base = request;
  base.margin = request.margin.value_or(kDefaultMargin);
  for (int gpus = 1; gpus <= max_gpus; ++gpus) {
    if (plan.baseline_batch % gpus != 0) continue;  // no per-GPU batch reaches it exactly
    const int64_t per_gpu = plan.baseline_batch / gpus;
    for (const Strategy strategy :
         strategies(gpus, stateful_optimizer, request.strategy, fsdp_wrap.has_value())) {
      LaunchCandidate c;
      c.gpus = gpus;
      c.strategy = strategy;
      // FSDP is offered, not asked for: a model it cannot shard (a unit mixing frozen and
      // trained parameters, as LoRA makes) is no candidate rather than an error.
      const bool offered = strategy == Strategy::kFsdp && !request.strategy;
      bool cannot = false;
      // The fewest micro-batches whose per-GPU batch fits: accumulation divides per_gpu.
      for (int64_t accum = 1; accum <= std::min<int64_t>(per_gpu, kMaxPlannedAccumulation);
           ++accum) {
        if (per_gpu % accum != 0) continue;
        TrainingRequest r = base;
        r.batch = per_gpu / accum;
        r.gpus = gpus;
        r.grad_accum = static_cast<int>(accum);
        r.strategy = gpus == 1 ? std::nullopt : std::optional<Strategy>(strategy);
        if (gpus == 1) {  // DDP's and FSDP's arguments need more than one GPU
          r.ddp = {};
          r.fsdp = {};
        } else if (strategy == Strategy::kFsdp && !request.strategy) {
          r.fsdp.wrap = *fsdp_wrap;
          r.ddp = {};
        }
        Result<Estimate> estimated = estimator.estimate(r);
        if (!estimated.ok() && offered) {
          cannot = true;
          break;
        }
        TF_ASSIGN_OR_RETURN(Estimate e, std::move(estimated));
        ++plan.estimates;
        c.per_gpu_batch = r.batch;
        c.grad_accum = r.grad_accum;
        c.fits = e.fits;
        c.step_s = e.time ? e.time->step_s : 0;
        c.estimate = std::move(e);
        c.request = std::move(r);
        if (c.fits) break;
      }
      if (!cannot) plan.candidates.push_back(std::move(c));
    }
  }
  if (plan.candidates.empty()) {
    return invalid_argument(fmt::format("no GPU count from 1 to {} divides the baseline's batch {}",
                                        max_gpus, plan.baseline_batch),
                            "a per-GPU batch x GPUs x micro-batches must equal it");
  }
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const LaunchCandidate& c = plan.candidates[i];
    if (!c.fits) continue;
    if (!plan.fastest || better(c, plan.candidates[*plan.fastest], false)) plan.fastest = i;
    if (!plan.cheapest || better(c, plan.candidates[*plan.cheapest], true)) plan.cheapest = i;
  }
  if (plan.fastest) plan.request = plan.candidates[*plan.fastest].request;
  return plan;
}

}  // namespace trainfit
