// For the lowering stage's tests: a graph small enough to work out by hand, and a way to find
// a node in a graph built for one test.
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace trainfit {

// x (4, 8) -> fc1 linear 16 -> relu -> fc2 linear 2 -> sum, fp32.
inline Graph two_linear_layers() {
  GraphBuilder b("m", {});
  ValueId x = b.input("x", {4, 8}, DType::kFloat32);
  {
    auto fc = b.module("fc1", "Linear");
    x = b.call1("linear", {x}, {{"out_features", int64_t{16}}});
  }
  x = b.call1("relu", {x});
  {
    auto fc = b.module("fc2", "Linear");
    x = b.call1("linear", {x}, {{"out_features", int64_t{2}}});
  }
  b.set_loss(b.call1("sum", {x}));
  return *std::move(b).finish();
}

// The `nth` node that runs `op` (from 0), or kNone.
inline NodeId node_of(const Graph& g, std::string_view op, int nth = 0) {
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].op->name == op && nth-- == 0) return static_cast<NodeId>(n);
  }
  return kNone;
}

}  // namespace trainfit
