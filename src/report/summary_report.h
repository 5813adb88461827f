// The `trainfit summary` report as data: the per-module table of a zoo model (graph/summary.h),
// with per-sample figures from the same model at batch 1. text.h and json.h render it.
//
//   Result<Summary> s = make_summary(request);
//   std::string text = summary_text(*s, 3);
#pragma once

#include "graph/summary.h"
#include "pipeline/request.h"

namespace trainfit {

// A zoo model's or a trace's summary at the request's batch, inputs, precision and profile;
// the training and device settings do not change it.
Result<Summary> make_summary(const TrainingRequest& request);

}  // namespace trainfit
