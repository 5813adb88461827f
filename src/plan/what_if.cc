#include "plan/what_if.h"

#include <algorithm>

namespace trainfit {

Result<WhatIf> what_if(Estimator& estimator, const TrainingRequest& request,
                       const std::vector<Knob>& knobs) {
  TF_CHECK(request.margin.has_value()) << "what_if needs the margin fit uses";
  WhatIf w;
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
    w.rows.push_back({k, std::move(variant), *std::move(e), fit});
  }
  std::stable_sort(w.rows.begin(), w.rows.end(), [](const WhatIfRow& a, const WhatIfRow& b) {
    if (a.fit.max_batch != b.fit.max_batch) return a.fit.max_batch > b.fit.max_batch;
    return a.estimate.device_used_bytes < b.estimate.device_used_bytes;
  });
  return w;
}

}  // namespace trainfit
