#include "plan/what_if.h"

#include <algorithm>
#include <limits>

namespace trainfit {

Result<WhatIf> what_if(Estimator& estimator, const TrainingRequest& request,
                       const std::vector<Knob>& knobs, Rank rank) {
  TF_CHECK(request.margin.has_value()) << "what_if needs the margin fit uses";
  WhatIf w;
  TF_ASSIGN_OR_RETURN(w.base, estimator.estimate(request));
  w.estimates = 1;
  for (const Knob& k : knobs) {
    TrainingRequest variant = with_knobs(request, {&k});
    Result<Estimate> e = estimator.estimate(variant);
    ++w.estimates;
    if (!e.ok()) {
      w.skipped.emplace_back(k.name, e.status().message());
      continue;
    }
    BatchSearch search(estimator, variant);
    TF_ASSIGN_OR_RETURN(BatchFit fit, search.fit(variant.device, *variant.margin));
    w.estimates += search.estimates();
    const std::optional<double> change = step_change(*e, w.base);
    w.rows.push_back({k, std::move(variant), *std::move(e), fit, change});
  }
  const auto by_memory = [](const WhatIfRow& a, const WhatIfRow& b) {
    if (a.fit.max_batch != b.fit.max_batch) return a.fit.max_batch > b.fit.max_batch;
    return a.estimate.device_used_bytes < b.estimate.device_used_bytes;
  };
  const auto by_time = [&](const WhatIfRow& a, const WhatIfRow& b) {
    constexpr double kNoTime = std::numeric_limits<double>::infinity();
    const double ta = a.step_change.value_or(kNoTime);
    const double tb = b.step_change.value_or(kNoTime);
    if (ta != tb) return ta < tb;
    return by_memory(a, b);
  };
  if (rank == Rank::kTime) {
    std::stable_sort(w.rows.begin(), w.rows.end(), by_time);
  } else {
    std::stable_sort(w.rows.begin(), w.rows.end(), by_memory);
  }
  return w;
}

}  // namespace trainfit
