#include "graph/activations.h"

#include "graph/device_rules.h"

namespace trainfit {

std::vector<KeptStorage> kept_for_backward(const Graph& graph) {
  std::vector<bool> seen(graph.storages.size(), false);
  std::vector<KeptStorage> kept;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    if (!node.recorded || !graph.on_loss_path[n]) continue;
    for (ValueId v : node.saved) {
      const auto sid = static_cast<size_t>(graph.value(v).storage);
      const Storage& s = graph.storages[sid];
      if (seen[sid] || s.kind != StorageKind::kActivation) continue;
      if (s.host && !host_tensors_use_device_memory(graph.target)) continue;
      seen[sid] = true;
      const ModuleId module = s.producer == kNone ? kNone : graph.nodes[s.producer].module;
      kept.push_back({static_cast<StorageId>(sid), s.bytes, module, s.producer});
    }
  }
  return kept;
}

int64_t activation_bytes(const Graph& graph) {
  int64_t total = 0;
  for (const KeptStorage& k : kept_for_backward(graph)) total += k.bytes;
  return total;
}

}  // namespace trainfit
