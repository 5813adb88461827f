// A graph small enough to work out by hand, for the lowering stage's tests: x (4, 8) ->
// fc1 linear 16 -> relu -> fc2 linear 2 -> sum, fp32.
#pragma once

#include "graph/builder.h"

namespace trainfit {

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

}  // namespace trainfit
