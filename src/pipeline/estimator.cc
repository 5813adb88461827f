#include "pipeline/estimator.h"

#include <algorithm>
#include <thread>

#include "base/parallel.h"

namespace trainfit {

Result<std::optional<StepTime>> predict_step_time(const TrainingRequest& request,
                                                  const EstimateRun* built) {
  TF_ASSIGN_OR_RETURN(const ResolvedRequest resolved, resolve(request));
  if (resolved.trace || !resolved.options.device.timing) return std::optional<StepTime>();
  if (built && !built->resolved.trace && built->resolved.model == resolved.model) {
    return graph_step_time(built->graph, resolved.options);
  }
  TF_ASSIGN_OR_RETURN(const Graph graph, build_model(resolved.model));
  return graph_step_time(graph, resolved.options);
}

void parallel_estimates(Estimator& estimator, size_t tasks,
                        const std::function<void(Estimator&, size_t task)>& work) {
  // A fork for each pool thread that joins, made by that thread; none where it cannot fork.
  // Pool threads are numbered below the hardware threads whatever TRAINFIT_THREADS says now.
  std::vector<std::unique_ptr<Estimator>> forks(
      std::max<size_t>(worker_limit(), std::thread::hardware_concurrency()));
  if (tasks < 2 || worker_limit() < 2 || forks.size() < 2 || !(forks[1] = estimator.fork())) {
    for (size_t task = 0; task < tasks; ++task) work(estimator, task);
    return;
  }
  parallel_for(tasks, [&](size_t worker, size_t task) {
    if (worker == 0) return work(estimator, task);
    if (!forks[worker]) forks[worker] = estimator.fork();
    work(*forks[worker], task);
  });
}

EventNames names_of(const EstimateRun& run) {
  return run.resolved.trace ? trace_names(*run.resolved.trace) : names_of(run.graph);
}

Result<const Graph*> PipelineEstimator::graph_of(const ModelRequest& model) {
  if (built_ != model) {
    built_.reset();
    TF_ASSIGN_OR_RETURN(graph_, build_model(model));
    built_ = model;
  }
  return &graph_;
}

Result<Estimate> PipelineEstimator::estimate_resolved(ResolvedRequest& resolved,
                                                      const EstimateDetail& detail) {
  EstimateOptions& options = resolved.options;
  options.timeline = detail.timeline;
  options.explain = detail.explain;
  options.peak_after_oom = detail.peak_after_oom;
  options.step_time = detail.step_time;
  if (resolved.trace) return estimate_trace(*resolved.trace, resolved.model.batch, options);
  TF_ASSIGN_OR_RETURN(const Graph* graph, graph_of(resolved.model));
  LoweredKey key{resolved.model, options.training, lowering_options(options.device)};
  if (lowered_key_ != key) {
    lowered_key_.reset();
    TF_ASSIGN_OR_RETURN(lowered_, lower_step(*graph, options));
    lowered_key_ = std::move(key);
  }
  return estimate_lowered(*graph, lowered_, options);
}

Result<Estimate> PipelineEstimator::estimate(const TrainingRequest& request,
                                             const EstimateDetail& detail) {
  TF_ASSIGN_OR_RETURN(ResolvedRequest resolved, resolve(request));
  return estimate_resolved(resolved, detail);
}

Result<EstimateRun> PipelineEstimator::run(const TrainingRequest& request,
                                           const EstimateDetail& detail) {
  EstimateRun run;
  TF_ASSIGN_OR_RETURN(run.resolved, resolve(request));
  TF_ASSIGN_OR_RETURN(run.estimate, estimate_resolved(run.resolved, detail));
  if (!run.resolved.trace) {
    run.graph = std::move(graph_);  // the run names its events by it
    built_.reset();
    lowered_key_.reset();
  }
  return run;
}

}  // namespace trainfit
