// A trace made batch-size independent: the runs matched event by event and each allocation's
// size fitted as affine in the batch, so that any batch size becomes an event list for the
// allocator model.
//
//   Result<std::shared_ptr<const TraceModel>> m = load_trace(text, "model.trace.json");
//   Result<Estimate> e = estimate_trace(**m, 64, options);   // milliseconds
//
// Under the cuda profile the replay maps what is specific to CPU kernels to what CUDA PyTorch
// does: CPU dropout's noise tensor (input dtype) becomes a bool mask, the first GEMM of
// forward and of backward allocates a cuBLAS workspace (and the first addmm cuBLASLt's), each
// convolution's kernels take cuDNN's workspaces for the problems the trace recorded, GradScaler
// scales and unscales under amp-fp16, and the optimizer step is the one the requested
// implementation makes (foreach by default), from the traced parameter groups.
#pragma once

#include <memory>

#include "estimate/estimate.h"
#include "graph/blocks.h"
#include "sources/trace/trace.h"

namespace trainfit {

struct TraceModel {
  Trace trace;  // runs[0]'s events carry everything but the sizes
  // Per event of runs[0]: bytes = intercept + slope * batch (allocations only).
  std::vector<int64_t> intercept;
  std::vector<int64_t> slope;
  // The module tree the trace's paths make (the model, then every path and the containers
  // above it, parents first; only modules are set), so that reports group modules into blocks
  // as they do for a zoo graph (graph.h module_blocks).
  Graph tree;
  IdVector<ModuleId> module_of;        // Trace::modules index -> its module in `tree`
  std::vector<ModuleId> param_module;  // Trace::params index -> its module in `tree`
  int64_t parameters = 0;              // elements of parameters (not buffers)
  int64_t trainable_parameters = 0;
};

// Checks that the runs line up and that every size is affine in the batch. With one run the
// model replays at that batch only.
Result<TraceModel> fit_trace(Trace trace);
// A trace file's text (`source` names it in errors) parsed and fitted: loaded once, shared by
// every estimate that replays it.
Result<std::shared_ptr<const TraceModel>> load_trace(std::string_view text,
                                                     std::string_view source);

// The events of a training step at `batch` under the device and training options (the
// optimizer implementation; the optimizer itself and everything else are the trace's).
Result<EventList> trace_events(const TraceModel& model, int64_t batch,
                               const EstimateOptions& options);

// The module in `model.tree` an event ran in; kNone outside modules.
ModuleId tree_module(const TraceModel& model, const TraceEvent& e);

// Names of the ops, modules and parameters the events refer to; it refers to `model`, which
// must outlive it.
EventNames trace_names(const TraceModel& model);

Result<Estimate> estimate_trace(const TraceModel& model, int64_t batch,
                                const EstimateOptions& options);

// Parameters per block, and the bytes one more sample keeps for backward per block (`trainfit
// compare`). Needs a trace at two batch sizes.
Result<BlockFigures> per_sample_blocks(const TraceModel& model, const EstimateOptions& options);

// A shape at `batch`, each dimension fitted as affine in the batch from its sizes at two
// batches (`second` null: known at `first_batch` only); nullopt when it is not.
std::optional<Dims> affine_dims(const Dims& first, int64_t first_batch, const Dims* second,
                                int64_t second_batch, int64_t batch);

// Elements of a traced parameter (bytes when its dtype is unknown).
int64_t elements(const TraceParam& p);

// Activations alive when the first backward starts, by module (`sign` -1 to take them away).
std::vector<BlockItem> kept_items(const EventList& list, int64_t sign);

// Caveats a report should print about replaying this trace on `target`, one sentence each.
std::vector<std::string> trace_notes(const TraceModel& model, const KernelTarget& target);

}  // namespace trainfit
