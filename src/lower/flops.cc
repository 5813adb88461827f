#include "lower/flops.h"

#include "base/size_math.h"
#include "graph/op_schema.h"
#include "lower/lowering.h"

namespace trainfit {
namespace {

// The node's call as its op's rules see it; `inputs` holds the pointers it refers to.
OpCall call_of(const Graph& graph, const Node& node, std::vector<const Value*>& inputs) {
  inputs.clear();
  for (ValueId v : node.inputs) inputs.push_back(&graph.value(v));
  return OpCall{node.attrs, inputs, graph.target, graph.precision, graph.memory_format};
}

}  // namespace

double node_flops(const Graph& graph, const Node& node) {
  const OpSchema& op = *node.op;
  if (op.data_movement || node.outputs.empty()) return 0;
  std::vector<const Value*> inputs;
  const OpCall call = call_of(graph, node, inputs);
  if (op.gemm) return op.gemm(call, graph.value(node.outputs[0]).shape).flops();
  double elements = 0;
  for (ValueId v : node.outputs) {
    elements += static_cast<double>(checked_numel(graph.value(v).shape).value_or(0));
  }
  return elements;
}

Result<StepFlops> step_flops(const Graph& graph, const std::vector<std::string>& checkpoint,
                             bool reentrant) {
  StepFlops f;
  std::vector<double> forward(graph.nodes.size(), 0);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    forward[n] = node_flops(graph, node);
    f.forward += forward[n];
    if (!node.recorded || !graph.on_loss_path[n]) continue;
    int needing = 0;
    for (ValueId v : node.inputs) needing += graph.value(v).requires_grad ? 1 : 0;
    // Gradients the forward already made (Liger's fused linear cross-entropy) cost nothing.
    std::vector<const Value*> inputs;
    const OpCall call = call_of(graph, node, inputs);
    for (const GradRule& rule : backward_of(*node.op, call).grads) needing -= rule.from_saved;
    f.backward += forward[n] * needing;
  }
  TF_ASSIGN_OR_RETURN(std::vector<CheckpointSegment> segments,
                      checkpoint_segments(graph, checkpoint, reentrant));
  for (const CheckpointSegment& s : segments) {
    if (s.recompute_stop == kNone) continue;  // nothing in it is kept: nothing re-runs
    for (NodeId n = s.first; n <= s.recompute_stop; ++n)
      f.recompute += forward[static_cast<size_t>(n)];
  }
  return f;
}

}  // namespace trainfit
