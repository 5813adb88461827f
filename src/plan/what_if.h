// What each memory knob does on its own: the estimate with it at the request's batch, its step
// time against the request's, and the largest batch it allows.
//
//   Result<WhatIf> w = what_if(estimator, request, knobs, Rank::kTime);  // request: GPU, margin
//   w->rows[0].knob.name, w->rows[0].estimate.device_used_bytes, w->rows[0].fit.max_batch,
//   w->rows[0].step_change   // -0.31: the step is 31% faster with it
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/batch_search.h"
#include "plan/knobs.h"

namespace trainfit {

struct WhatIfRow {
  Knob knob;
  TrainingRequest request;  // the request with the knob on (request_args reproduces it)
  Estimate estimate;
  BatchFit fit;
  std::optional<double> step_change;  // over `WhatIf::base` (step_change in knobs.h)
};

struct WhatIf {
  Estimate base;  // the request as given
  // Rank::kMemory: largest max batch first, then smallest device use. Rank::kTime: fastest step
  // first, then largest max batch; rows without a step time last.
  std::vector<WhatIfRow> rows;
  std::vector<std::pair<std::string, std::string>> skipped;  // knob, why it does not apply
  int estimates = 0;
};

// Rows whose request the model rejects (a knob that conflicts with the model) are skipped with
// the reason. `request.margin` must be set.
Result<WhatIf> what_if(Estimator& estimator, const TrainingRequest& request,
                       const std::vector<Knob>& knobs, Rank rank = Rank::kMemory);

}  // namespace trainfit
