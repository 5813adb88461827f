// The estimator: a training request in, its estimate out. The planner (src/plan) calls it
// through this interface, so that its searches can be tested against a fake one; the command
// line, the Python binding and the reports use the real pipeline.
//
//   PipelineEstimator estimator;
//   Result<Estimate> e = estimator.estimate(request);           // resolve, build, lower, replay
//   Result<EstimateRun> run = estimator.run(request, {.explain = true});
//   run->estimate.peak_reserved_bytes; names_of(*run).module(...)
#pragma once

#include <optional>

#include "pipeline/request.h"

namespace trainfit {

// What to compute beyond the figures.
struct EstimateDetail {
  bool timeline = false;  // allocated and reserved after every event
  bool explain = false;   // the tensors alive at the peak
  // On out of memory, replay again without a limit to say what the run would need; a search
  // that only asks whether it fits turns this off.
  bool peak_after_oom = true;
  bool step_time = true;  // on a GPU with timing constants; a memory-only search turns it off
};

class Estimator {
 public:
  virtual ~Estimator() = default;
  // A request the model rejects (an unknown key, an impossible shape) is an error, not a
  // failure to fit.
  virtual Result<Estimate> estimate(const TrainingRequest& request,
                                    const EstimateDetail& detail = {}) = 0;
};

// The step time of a request without its memory estimate: the graph and the cost model on the
// request's GPU. nullopt where there is none to give (no GPU named, the cpu profile, a trace).
Result<std::optional<StepTime>> predict_step_time(const TrainingRequest& request);

// One estimate with what it ran on: the resolved request and the zoo graph (empty for a trace).
struct EstimateRun {
  ResolvedRequest resolved;
  Graph graph;
  Estimate estimate;
};
// What an estimate's events are called: the zoo graph's or the trace's names. It refers to
// `run`, which must outlive it.
EventNames names_of(const EstimateRun& run);

// The whole pipeline. It keeps the last graph it built, so that probes of one configuration at
// one batch (a batch search near the limit) build it once. Not shared between threads.
class PipelineEstimator final : public Estimator {
 public:
  Result<Estimate> estimate(const TrainingRequest& request,
                            const EstimateDetail& detail = {}) override;
  Result<EstimateRun> run(const TrainingRequest& request, const EstimateDetail& detail = {});

 private:
  Result<const Graph*> graph_of(const ModelRequest& model);
  Result<Estimate> estimate_resolved(ResolvedRequest& resolved, const EstimateDetail& detail);

  std::optional<ModelRequest> built_;
  Graph graph_;
};

}  // namespace trainfit
