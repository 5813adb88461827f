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
  // Every GPU count that divides the batch, with each strategy it can take; each one's fewest
  // micro-batches found on its own, side by side.
  std::vector<std::pair<int, Strategy>> tried;
  for (int gpus = 1; gpus <= max_gpus; ++gpus) {
    if (plan.baseline_batch % gpus != 0) continue;  // no per-GPU batch reaches it exactly
    for (const Strategy strategy :
         strategies(gpus, stateful_optimizer, request.strategy, fsdp_wrap.has_value())) {
      tried.emplace_back(gpus, strategy);
    }
  }
  struct Found {
    Result<std::optional<LaunchCandidate>> candidate = std::optional<LaunchCandidate>();
    int estimates = 0;
  };
  std::vector<Found> found(tried.size());
  parallel_estimates(estimator, tried.size(), [&](Estimator& mine, size_t i) {
    const auto [gpus, strategy] = tried[i];
    const int64_t per_gpu = plan.baseline_batch / gpus;
    LaunchCandidate c;
    c.gpus = gpus;
    c.strategy = strategy;
    // FSDP is offered, not asked for: a model it cannot shard (a unit mixing frozen and
    // trained parameters, as LoRA makes) is no candidate rather than an error.
    const bool offered = strategy == Strategy::kFsdp && !request.strategy;
    // The fewest micro-batches whose per-GPU batch fits: accumulation divides per_gpu.
    for (int64_t accum = 1; accum <= std::min<int64_t>(per_gpu, kMaxPlannedAccumulation); ++accum) {
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
      Result<Estimate> estimated = mine.estimate(r);
      if (!estimated.ok()) {
        if (!offered) found[i].candidate = estimated.status();
        return;  // offered and not possible: no candidate
      }
      ++found[i].estimates;
      c.per_gpu_batch = r.batch;
      c.grad_accum = r.grad_accum;
      c.fits = estimated->fits;
      c.step_s = estimated->time ? estimated->time->step_s : 0;
      c.estimate = *std::move(estimated);
      c.request = std::move(r);
      if (c.fits) break;
    }
    found[i].candidate = std::optional<LaunchCandidate>(std::move(c));
  });
  for (Found& f : found) {
    plan.estimates += f.estimates;
    if (!f.candidate.ok()) return f.candidate.status();
    if (*f.candidate) plan.candidates.push_back(**std::move(f.candidate));
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
