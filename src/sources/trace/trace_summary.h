// The per-module table of a trace (`trainfit summary --trace`, `trainfit.summary` on a live
// model), from the events a trace replays at a batch.
//
//   Result<Summary> s = summarize_trace(*model, 64, options);
//   s->modules[i].kept_bytes, s->modules[i].output_shape ...
#pragma once

#include "graph/summary.h"
#include "sources/trace/trace_model.h"

namespace trainfit {

// The table at `batch`: parameters by module (a parameter counts in the module that owns it),
// bytes kept for backward by the module whose op made them (both rolled up to every
// ancestor), and per sample from `batch` and one more. Rows follow the model's named_modules()
// when the trace recorded them, with their types and output shapes (fitted as affine in the
// batch); otherwise the modules the events name.
Result<Summary> summarize_trace(const TraceModel& model, int64_t batch,
                                const EstimateOptions& options);

}  // namespace trainfit
