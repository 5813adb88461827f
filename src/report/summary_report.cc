#include "report/summary_report.h"

namespace trainfit {

Result<Summary> make_summary(const TrainingRequest& request) {
  if (request.trace) {
    return unsupported("summary lists a zoo model's modules; a trace has no module table",
                       "give --model NAME, or use trainfit estimate --trace");
  }
  TF_ASSIGN_OR_RETURN(const ResolvedRequest resolved, resolve(request));
  TF_ASSIGN_OR_RETURN(const Graph graph, build_model(resolved.model));
  ModelRequest one = resolved.model;
  one.batch = 1;
  Result<Graph> per_sample = build_model(one);
  return summarize(graph, per_sample.ok() ? &*per_sample : nullptr);
}

}  // namespace trainfit
