// The estimate pipeline from parsed flags, shared by the commands that estimate (estimate,
// compare, fit): request, training config, device profile, allocator, graph, estimate.
//
//   EstimateFlags f;                      // --model, --batch, --optimizer, --gpu, ...
//   Result<EstimateRun> run = run_pipeline(f, {});
//   run->estimate.peak_allocated_bytes; estimate_json(run->header, run->estimate);
//
//   Result<ResolvedEstimate> r = resolve_flags(f);   // parse once, then vary the batch:
//   r->request.batch = 64; Result<Estimate> e = run_resolved(*r);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/model_source.h"
#include "cli/training_options.h"
#include "report/estimate_report.h"
#include "sources/trace/trace_model.h"

namespace trainfit {

// Every flag that decides one estimate.
struct EstimateFlags {
  ModelSourceOptions source;
  TrainingFlags training;
  DeviceFlags device;
};

void add_estimate_flags(CLI::App& app, EstimateFlags& flags);
// The same flags where a later value of an option overrides an earlier one (so that a model's
// own --batch overrides a shared one, or a what-if's --precision the user's) and lists add up.
void add_layered_flags(CLI::App& app, EstimateFlags& flags);
Result<EstimateFlags> parse_layered_flags(const std::vector<std::string>& args);
// The flags as command-line arguments that parse back to the same flags (defaults left out):
// what `fit` prints to reproduce a row, and what its tests run `estimate` with.
std::vector<std::string> estimate_args(const EstimateFlags& flags);

struct PipelineExtras {
  bool timeline = false;
  bool explain = false;
};

struct EstimateRun {
  ModelRequest request;
  Graph graph;  // empty for a trace
  std::shared_ptr<const TraceModel> trace;
  EstimateHeader header;
  Estimate estimate;
};

// The flags parsed and checked: everything an estimate needs but the graph.
struct ResolvedEstimate {
  ModelRequest request;
  EstimateOptions options;
  std::shared_ptr<const TraceModel> trace;  // --trace: replayed instead of a zoo graph
};

Result<ResolvedEstimate> resolve_flags(const EstimateFlags& flags);
Result<Estimate> run_resolved(const ResolvedEstimate& resolved);
EstimateHeader header_of(const ResolvedEstimate& resolved);

Result<EstimateRun> run_pipeline(const EstimateFlags& flags, const PipelineExtras& extras);
// What an estimate's events are called: the zoo graph's or the trace's names.
EventNames names_of(const EstimateRun& run);
// A trace file read and fitted once, however many estimates use it (cached by content).
Result<std::shared_ptr<const TraceModel>> load_trace_model(const std::string& path);
Result<EstimateRun> run_pipeline(const ModelSourceOptions& source, const TrainingFlags& training,
                                 const DeviceFlags& device, const PipelineExtras& extras);

}  // namespace trainfit
