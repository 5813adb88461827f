// The estimator: a training request in, its estimate out. The planner (src/plan) calls it
// through this interface, so that its searches can be tested against a fake one; the command
// line, the Python binding and the reports use the real pipeline.
//
//   PipelineEstimator estimator;
//   Result<Estimate> e = estimator.estimate(request);           // resolve, build, lower, replay
//   Result<EstimateRun> run = estimator.run(request, {.explain = true});
//   run->estimate.peak_reserved_bytes; names_of(*run).module(...)
#pragma once

#include <functional>
#include <memory>
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
  // An estimator giving the same answers, for another thread (base/parallel.h); nullptr where
  // this one cannot be shared out, and its user then runs everything on it, in turn.
  virtual std::unique_ptr<Estimator> fork() { return nullptr; }
};

// Runs work(estimator, task) for every task in [0, tasks), side by side (base/parallel.h): the
// calling thread on `estimator`, each other worker on a fork of it; all on `estimator`, in turn,
// where it cannot fork. A task's answer must not depend on what ran before it on its estimator.
void parallel_estimates(Estimator& estimator, size_t tasks,
                        const std::function<void(Estimator&, size_t task)>& work);

// One estimate with what it ran on: the resolved request and the zoo graph (empty for a trace).
struct EstimateRun {
  ResolvedRequest resolved;
  Graph graph;
  Estimate estimate;
};

// The step time of a request without its memory estimate: the graph and the cost model on the
// request's GPU. nullopt where there is none to give (no GPU named, the cpu profile, a trace).
// `built`: a run whose graph is used, not built again, where the request's model is the same
// (a change of TF32 or of the loop leaves the graph as it is).
Result<std::optional<StepTime>> predict_step_time(const TrainingRequest& request,
                                                  const EstimateRun* built = nullptr);
// What an estimate's events are called: the zoo graph's or the trace's names. It refers to
// `run`, which must outlive it.
EventNames names_of(const EstimateRun& run);

// The whole pipeline. It keeps the last graph it built and the step it lowered, so that probes
// of one configuration at one batch under other memory limits (a batch search near the limit,
// its cards' budgets) build and lower it once and only replay the allocator. Not shared between
// threads.
class PipelineEstimator final : public Estimator {
 public:
  Result<Estimate> estimate(const TrainingRequest& request,
                            const EstimateDetail& detail = {}) override;
  Result<EstimateRun> run(const TrainingRequest& request, const EstimateDetail& detail = {});
  std::unique_ptr<Estimator> fork() override { return std::make_unique<PipelineEstimator>(); }

 private:
  Result<const Graph*> graph_of(const ModelRequest& model);
  Result<Estimate> estimate_resolved(ResolvedRequest& resolved, const EstimateDetail& detail);

  // What a lowered step depends on (estimate.h lower_step).
  struct LoweredKey {
    ModelRequest model;
    TrainingConfig training;
    LoweringOptions lowering;
    bool operator==(const LoweredKey&) const = default;
  };

  std::optional<ModelRequest> built_;
  Graph graph_;
  std::optional<LoweredKey> lowered_key_;
  LoweredStep lowered_;
};

}  // namespace trainfit
