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

#include "core/status.h"
#include "core/training.h"

namespace trainfit {

Result<EventList> lower_training_step(const Graph& graph, const TrainingConfig& config,
                                      const LoweringOptions& options);

}  // namespace trainfit
