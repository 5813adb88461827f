// Lowering: a model graph and a training configuration become the ordered allocation events of
// `iterations` training steps (forward, loss, backward, optimizer.step, zero_grad with
// set_to_none=True), as PyTorch would run them.
//
//   Result<EventList> events = lower_training_step(graph, config, {});
//
// Forward frees each storage after its last use unless autograd keeps it; kept storages live
// until the last backward node that saved them has run. Backward runs recorded nodes in reverse
// order: each allocates its input gradients (or hands on a view of its incoming one), releases
// its incoming gradients and saved tensors, and a parameter's first gradient becomes its .grad
// without a copy (AccumulateGrad steals it). Optimizer state appears at the first step.
#pragma once

#include "base/status.h"
#include "lower/events.h"
#include "lower/training.h"

namespace trainfit {

// What the device adds beyond the graph's ops.
struct LoweringOptions {
  int64_t cublas_workspace_bytes = 0;    // per cuBLAS handle, allocated at its first GEMM
  int64_t cublaslt_workspace_bytes = 0;  // the forward thread's cuBLASLt handle, likewise
  bool op_workspaces = false;            // transient memory inside kernels (CUDA)
  bool operator==(const LoweringOptions&) const = default;
};

// A checkpointed module call: nodes [first, end). Inside it autograd keeps nothing during
// forward; the segment's inputs stay alive until its backward has finished, and its first
// backward node recomputes nodes [first, recompute_stop] (torch.utils.checkpoint,
// use_reentrant=False: 1.13 re-runs the whole module, 2.x stops once every kept tensor is back).
struct CheckpointSegment {
  NodeId first = 0;
  NodeId end = 0;
  NodeId last_to_run = kNone;  // the smallest recorded node: its backward ends the segment
  NodeId recompute_stop = kNone;
  std::vector<StorageId> held_inputs;
  // use_reentrant=True: CheckpointFunction.backward recomputes the whole segment as soon as it
  // runs, and holds the recomputed outputs (`outputs`) and their incoming gradients (`args`)
  // until the segment's backward returns.
  bool reentrant = false;
  std::vector<StorageId> outputs;  // produced inside, used after it
};

// The segments the --checkpoint patterns select, in node order; a module inside an already
// checkpointed one is part of it. A pattern that matches no module is an error, and so, under
// use_reentrant=True, is a segment none of whose inputs requires grad (PyTorch would give its
// parameters no gradients).
Result<std::vector<CheckpointSegment>> checkpoint_segments(const Graph& graph,
                                                           const std::vector<std::string>& patterns,
                                                           bool reentrant = false);

// The most ops times micro-batches a step is lowered over: every micro-batch's ops are replayed
// (about 0.3 KB and 1.7 us each through an estimate: Mixtral's 6,123 ops over 1,024 micro-batches
// took 2.0 GB and 10.6 s), so ten million is some 3 GB and 17 seconds. Past it, --grad-accum is
// refused rather than taking the host's memory.
inline constexpr int64_t kMaxLoweredOps = 10'000'000;

Result<EventList> lower_training_step(const Graph& graph, const TrainingConfig& config,
                                      const LoweringOptions& options);

}  // namespace trainfit
