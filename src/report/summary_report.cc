#include "report/summary_report.h"

#include "sources/trace/trace_summary.h"

namespace trainfit {

Result<Summary> make_summary(const TrainingRequest& request) {
  TF_ASSIGN_OR_RETURN(const ResolvedRequest resolved, resolve(request));
  if (resolved.trace) return summarize_trace(*resolved.trace, request.batch, resolved.options);
  TF_ASSIGN_OR_RETURN(const Graph graph, build_model(resolved.model));
  ModelRequest one = resolved.model;
  one.batch = 1;
  Result<Graph> per_sample = build_model(one);
  return summarize(graph, per_sample.ok() ? &*per_sample : nullptr);
}

}  // namespace trainfit
