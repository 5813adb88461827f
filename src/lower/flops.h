// Floating-point operations of one training step, counted from the graph's shapes: what
// activation checkpointing costs in recompute, as a share of the step.
//
//   Result<StepFlops> f = step_flops(graph, {"layer3.*"});
//   f->recompute / f->step()   // 0.08: checkpointing layer3's blocks adds 8% to the step
//
// Products and convolutions count 2 x M x N x K; other ops one per output element; views none.
// Backward costs each recorded op its forward count once per input that needs a gradient (the
// gradient of a product with respect to either operand is a product of the same size).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "graph/graph.h"

namespace trainfit {

struct StepFlops {
  double forward = 0;
  double backward = 0;
  double recompute = 0;  // forward ops that checkpointing re-runs during backward
  double step() const { return forward + backward; }
};

// Forward FLOPs of one node.
double node_flops(const Graph& graph, const Node& node);
Result<StepFlops> step_flops(const Graph& graph, const std::vector<std::string>& checkpoint,
                             bool reentrant = false);

}  // namespace trainfit
