#include "report/loader_report.h"

#include <fmt/format.h>

#include "base/units.h"
#include "pipeline/estimator.h"

namespace trainfit {

Result<LoaderReport> make_loader_report(const LoaderReportRequest& q) {
  if (!q.profile) {
    return invalid_argument("no loader profile",
                            "give --profile FILE from python3 -m trainfit.loader");
  }
  if (q.training.has_value() == q.step_time_s.has_value()) {
    return invalid_argument(
        "the GPU's rate needs either a model with --gpu or --step-time, not both or neither",
        "e.g. --model resnet50 --gpu rtx4090, or --step-time 80ms");
  }
  LoaderRequest r;
  r.given = q.given;
  r.host = q.host;
  if (q.training) {
    TF_ASSIGN_OR_RETURN(const std::optional<StepTime> step, predict_step_time(*q.training));
    if (!step) {
      return invalid_argument(
          "no step time to plan for: the model's step time needs a GPU (and a zoo model)",
          "add --gpu NAME (see trainfit gpus), or give --step-time 80ms");
    }
    r.batch = q.training->batch;
    // The loader delivers micro-batches; with gradient accumulation a step takes several.
    r.step_time_s = step->step_s / q.training->grad_accum;
    const std::string model = q.training->trace ? q.training->trace_source : q.training->model;
    r.step_time_from = fmt::format("predicted for {} at batch {} on {}", model, r.batch,
                                   q.training->device.gpu_display);
  } else {
    r.batch = q.batch;
    r.step_time_s = *q.step_time_s;
    r.step_time_from = "given";
  }
  TF_ASSIGN_OR_RETURN(LoaderPlan plan, plan_loader(*q.profile, r));
  return LoaderReport{q.profile, std::move(plan)};
}

}  // namespace trainfit
