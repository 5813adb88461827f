// What autograd keeps for backward at the end of the forward pass.
//
//   for (const KeptStorage& k : kept_for_backward(graph)) { ... k.bytes, k.module ... }
//   int64_t bytes = activation_bytes(graph);
//
// The unit is a storage: a view or an in-place result keeps its whole base storage alive, and
// a storage kept by several backward nodes counts once. Parameters, buffers and the batch
// inputs are not activations. Only nodes that autograd recorded and whose outputs reach the
// loss keep anything at the end of the forward pass. Host-memory storages (wrapped Python
// scalars) count under the cpu target only.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace trainfit {

struct KeptStorage {
  StorageId storage = kNone;
  int64_t bytes = 0;
  ModuleId module = kNone;  // the module whose op allocated it
  NodeId producer = kNone;
};

std::vector<KeptStorage> kept_for_backward(const Graph& graph);
int64_t activation_bytes(const Graph& graph);

}  // namespace trainfit
