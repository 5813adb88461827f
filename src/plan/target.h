// A target batch: the least intrusive combination of knobs under which it fits, or the gradient
// accumulation that reaches it with the largest micro-batch that fits.
//
//   Result<TargetPlan> p = plan_target(estimator, request, knobs, 512, false, Rank::kMemory);
//   p->fits ? request_args(p->request)          // the knobs that make batch 512 fit
//           : p->micro_batch, p->accumulation   // else 128 x 4 steps
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "plan/batch_search.h"
#include "plan/knobs.h"

namespace trainfit {

struct TargetPlan {
  int64_t target = 0;
  bool fits = false;                    // as given, or with `knobs`
  std::vector<Knob> knobs;              // the combination (empty: fits as given)
  TrainingRequest request;              // the request that fits, or the accumulation plan's
  Estimate estimate;                    // of `request`
  Estimate as_given;                    // the user's request at the target batch
  int64_t micro_batch = 0;              // accumulation plan (fits is false): micro-batch ...
  int64_t accumulation = 0;             // ... times steps ...
  int64_t effective_batch = 0;          // ... = this, N or the nearest above it
  bool accumulation_estimated = false;  // `request` and `estimate` are the accumulation plan's;
                                        // false past kMaxPlannedAccumulation steps: said only
  std::optional<double> step_change;    // time per sample of `estimate` over `as_given`'s
  int combinations_tried = 0;           // estimates made
};

// Tries knobs from the least intrusive kind up (free, precision, recompute, recipe, and model
// changes only when allowed); within the cheapest kind that fits, the combination with the
// least recompute (Rank::kTime: the least step time, as the sum of each knob's change alone),
// then the fewest knobs. A combination the model rejects (conflicting knobs) is not a failure
// to fit. `request.margin` must be set.
Result<TargetPlan> plan_target(Estimator& estimator, const TrainingRequest& request,
                               const std::vector<Knob>& knobs, int64_t target,
                               bool allow_model_changes, Rank rank = Rank::kMemory);

}  // namespace trainfit
