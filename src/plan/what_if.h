// What each memory knob does on its own: the estimate with it at the request's batch, and the
// largest batch it allows.
//
//   Result<WhatIf> w = what_if(estimator, request, knobs);   // request: its GPU and margin
//   w->rows[0].knob.name, w->rows[0].estimate.device_used_bytes, w->rows[0].fit.max_batch
#pragma once

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
};

struct WhatIf {
  std::vector<WhatIfRow> rows;  // largest max batch first, then smallest device use
  std::vector<std::pair<std::string, std::string>> skipped;  // knob, why it does not apply
  int estimates = 0;
};

// Rows whose request the model rejects (a knob that conflicts with the model) are skipped with
// the reason. `request.margin` must be set.
Result<WhatIf> what_if(Estimator& estimator, const TrainingRequest& request,
                       const std::vector<Knob>& knobs);

}  // namespace trainfit
