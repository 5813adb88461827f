#include "lower/grad_layout.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/builder.h"
#include "lower/lowering.h"
#include "lower/two_layers_test_util.h"

namespace trainfit {
namespace {

constexpr KernelTarget kCpu{Device::kCpu, TorchVersion::k1_13};
constexpr KernelTarget kCuda{Device::kCuda, TorchVersion::k2};
constexpr int64_t kL = 5, kB = 3, kE = 8, kHeads = 2;

// x (L, B, E by default) -> linear E -> `body` -> sum: the loss.
Graph chain(KernelTarget target, const std::function<ValueId(GraphBuilder&, ValueId)>& body,
            const Dims& input = {kL, kB, kE}) {
  BuildOptions o;
  o.target = target;
  GraphBuilder b("chain", o);
  ValueId x = b.input("x", input, DType::kFloat32);
  {
    auto root = b.module("", "Chain");
    {
      auto proj = b.module("proj", "Linear");
      x = b.call1("linear", {x}, {{"out_features", kE}});
    }
    x = body(b, x);
  }
  b.set_loss(b.call1("sum", {x}));
  return *std::move(b).finish();
}

struct Alloc {
  int64_t bytes;
  Category category;
  NodeId node;
};

// One training iteration's events.
EventList lower_once(const Graph& g, bool workspaces = false) {
  TrainingConfig c;
  c.iterations = 1;
  LoweringOptions o;
  o.op_workspaces = workspaces;
  Result<EventList> events = lower_training_step(g, c, o);
  EXPECT_TRUE(events.ok()) << events.status().to_string();
  return events.ok() ? *std::move(events) : EventList{};
}

// The first iteration's backward allocations, in order.
std::vector<Alloc> backward_allocs(const Graph& g, bool workspaces) {
  const EventList events = lower_once(g, workspaces);
  std::vector<Alloc> out;
  for (const Event& e : events.events) {
    if (!e.alloc || e.phase != Phase::kBackward) continue;
    const Buffer& b = events.buffers[e.buffer];
    out.push_back({b.bytes, b.category, e.node});
  }
  return out;
}

int allocs_at(const std::vector<Alloc>& allocs, NodeId node, int64_t bytes) {
  int count = 0;
  for (const Alloc& a : allocs) count += a.node == node && a.bytes == bytes ? 1 : 0;
  return count;
}

constexpr int64_t kActivation = kL * kB * kE * 4;

// The heads of nn.MultiheadAttention: (L, B, E) -> (L, B*H, d) -> (B*H, L, d), scaled.
ValueId heads(GraphBuilder& b, ValueId x) {
  x = b.call1("view", {x}, {{"shape", Dims{kL, kB * kHeads, kE / kHeads}}});
  x = b.call1("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  return b.call1("mul_scalar", {x}, {{"value", 0.5}});
}

TEST(GradLayout, AViewOfATransposedGradientCopiesIt) {
  // mul_scalar's gradient is contiguous (B*H, L, d); transposed back it is (L, B*H, d) out of
  // order, and view's backward reshapes it to (L, B, E): a copy, on every device.
  for (KernelTarget t : {kCpu, kCuda}) {
    const Graph g = chain(t, heads);
    const std::vector<Alloc> allocs = backward_allocs(g, t.device == Device::kCuda);
    EXPECT_EQ(allocs_at(allocs, node_of(g, "view"), kActivation), 1);
  }
}

TEST(GradLayout, AViewOfAnInOrderGradientIsAView) {
  const Graph g = chain(kCpu, [](GraphBuilder& b, ValueId x) {
    x = b.call1("view", {x}, {{"shape", Dims{kL, kB * kHeads, kE / kHeads}}});
    return b.call1("mul_scalar", {x}, {{"value", 0.5}});
  });
  const std::vector<Alloc> allocs = backward_allocs(g, false);
  EXPECT_EQ(allocs_at(allocs, node_of(g, "view"), kActivation), 0);
}

TEST(GradLayout, TransposedTwiceReshapesAsAViewAndTheNextLinearCopiesIt) {
  // k's path: a gradient made as (B*H, d, L) comes back through two transposes as (L, B*H, d)
  // with strides (1, d*L, L): (L, B, E) is a view of that, but the linear before it cannot fold
  // (L, B) into rows without a copy, which view's backward makes before the linear's node.
  const Graph g = chain(kCpu, [](GraphBuilder& b, ValueId x) {
    x = b.call1("view", {x}, {{"shape", Dims{kL, kB * kHeads, kE / kHeads}}});
    x = b.call1("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
    x = b.call1("transpose", {x}, {{"dim0", int64_t{-2}}, {"dim1", int64_t{-1}}});
    return b.call1("mul_scalar", {x}, {{"value", 0.5}});
  });
  const std::vector<Alloc> allocs = backward_allocs(g, false);
  EXPECT_EQ(allocs_at(allocs, node_of(g, "view"), kActivation), 0);
  const NodeId linear = node_of(g, "linear");
  ASSERT_FALSE(allocs.empty());
  const auto first =
      std::find_if(allocs.begin(), allocs.end(), [&](const Alloc& a) { return a.node == linear; });
  ASSERT_NE(first, allocs.end());
  EXPECT_EQ(first->bytes, kActivation);
  EXPECT_EQ(first->category, Category::kTemporary);
}

TEST(GradLayout, LayerNormCopiesAnOutOfOrderGradientInItsCudaKernel) {
  const auto body = [](GraphBuilder& b, ValueId x) {
    x = b.call1("layer_norm", {x}, {{"normalized_shape", Dims{kE}}});
    x = b.call1("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
    return b.call1("mul_scalar", {x}, {{"value", 0.5}});
  };
  const Graph cuda = chain(kCuda, body);
  const std::vector<Alloc> on_cuda = backward_allocs(cuda, true);
  const NodeId norm = node_of(cuda, "layer_norm");
  // dX, then the kernel's dY.contiguous() (after dgamma and dbeta).
  EXPECT_EQ(allocs_at(on_cuda, norm, kActivation), 2);
  int64_t last = 0;
  for (const Alloc& a : on_cuda) {
    if (a.node == norm) last = a.bytes;
  }
  EXPECT_EQ(last, kActivation);
  // The CPU's checks see no kernel's temporaries.
  const Graph cpu = chain(kCpu, body);
  EXPECT_EQ(allocs_at(backward_allocs(cpu, false), node_of(cpu, "layer_norm"), kActivation), 1);
}

TEST(GradLayout, LayerNormCopiesATransposedInputInItsCudaBackward) {
  // A LayerNorm over a transposed tensor: layer_norm_backward_cuda's input.expect_contiguous()
  // copies the saved input before dX, and frees it when the kernel returns.
  const auto body = [](GraphBuilder& b, ValueId x) {
    x = b.call1("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
    x = b.call1("layer_norm", {x}, {{"normalized_shape", Dims{kE}}});
    return b.call1("mul_scalar", {x}, {{"value", 0.5}});
  };
  const Graph cuda = chain(kCuda, body);
  const NodeId norm = node_of(cuda, "layer_norm");
  const EventList events = lower_once(cuda, /*workspaces=*/true);
  std::vector<std::pair<bool, Category>> at_norm;
  BufferId copy = -1;
  for (const Event& e : events.events) {
    if (e.phase != Phase::kBackward || e.node != norm) continue;
    const Buffer& b = events.buffers[e.buffer];
    if (copy < 0 && e.alloc) copy = e.buffer;
    if (b.bytes == kActivation) at_norm.emplace_back(e.alloc, b.category);
  }
  ASSERT_GE(copy, 0);
  EXPECT_EQ(events.buffers[copy].bytes, kActivation);
  EXPECT_EQ(events.buffers[copy].category, Category::kWorkspace);
  ASSERT_GE(at_norm.size(), 2U);
  EXPECT_EQ(at_norm[0], std::make_pair(true, Category::kWorkspace));  // the input's copy
  EXPECT_EQ(at_norm[1].first, true);                                  // then dX
  // The CPU's checks see no kernel's copies.
  const Graph cpu = chain(kCpu, body);
  EXPECT_EQ(allocs_at(backward_allocs(cpu, false), node_of(cpu, "layer_norm"), kActivation), 1);
}

// Note [Memory-efficient attention's backward]: nn.MultiheadAttention's q, k and v as (B, H, L,
// e) views of the projection, the output permuted back to (L, B, H, e). Its gradient arrives in
// that order, so the kernel copies it into the output's (B, L, H, e) layout first; then the
// gradients, fp32 delta through grad_out * out and its sum, and the dq tiles; delta, the
// workspace and the copy go in that order.
TEST(GradLayout, EfficientAttentionCopiesAPermutedGradientFirst) {
  constexpr int64_t kHead = kE / kHeads;
  const auto body = [](GraphBuilder& b, ValueId x) {
    x = b.call1("reshape", {x}, {{"shape", Dims{kL, kB, kHeads, kHead}}});
    x = b.call1("permute", {x}, {{"dims", Dims{1, 2, 0, 3}}});
    x = b.call1("sdpa_efficient", {x, x, x});
    x = b.call1("permute", {x}, {{"dims", Dims{2, 0, 1, 3}}});
    return b.call1("contiguous", {x});
  };
  const Graph cuda = chain(KernelTarget{Device::kCuda, TorchVersion::k2, /*sm=*/90}, body);
  const NodeId attention = node_of(cuda, "sdpa_efficient");
  const EventList events = lower_once(cuda, /*workspaces=*/true);
  constexpr int64_t kOut = kB * kHeads * kL * kHead * 4;  // 480 bytes
  constexpr int64_t kRows = kB * kHeads;
  constexpr int64_t kDelta = kRows * kL * 4;
  constexpr int64_t kTiles = kRows * (4 + 64 * 64) * 4;  // one query block, one column block
  std::vector<std::string> at;
  for (const Event& e : events.events) {
    if (e.phase != Phase::kBackward || e.node != attention) continue;
    const Buffer& b = events.buffers[e.buffer];
    at.push_back(fmt::format("{}{} {}", e.alloc ? "+" : "-", b.bytes, category_name(b.category)));
  }
  const std::string ws = std::string(category_name(Category::kWorkspace));
  const std::string grad = std::string(category_name(Category::kTemporary));
  ASSERT_GE(at.size(), 12U);
  const std::vector<std::string> want = {
      fmt::format("+{} {}", kOut, ws),    // grad_out.transpose(1, 2).contiguous()
      fmt::format("+{} {}", kOut, grad),  // dq, dk, dv
      fmt::format("+{} {}", kOut, grad),  //
      fmt::format("+{} {}", kOut, grad),  //
      fmt::format("+{} {}", kOut, ws),    // grad_out * out
      fmt::format("+{} {}", kDelta, ws),  // its sum
      fmt::format("+{} {}", kDelta, ws),  // delta
      fmt::format("-{} {}", kDelta, ws),  //
      fmt::format("-{} {}", kOut, ws),    //
      fmt::format("+{} {}", kTiles, ws),  // the kernel's workspace
      fmt::format("-{} {}", kDelta, ws),  // delta, then the workspace, then the copy
      fmt::format("-{} {}", kTiles, ws)};
  EXPECT_EQ(std::vector<std::string>(at.begin(), at.begin() + 12), want);
  EXPECT_EQ(at[12], fmt::format("-{} {}", kOut, ws));
}

// Note [A module's arguments]: the caller holds what it passes until the module returns.
// FrozenBatchNorm2d's x * scale + bias reads x in its first op; x goes after the add, after the
// product the add consumed. A ModuleList is never called, so its owner frees x at its last read.
TEST(GradLayout, AModulesArgumentLivesUntilTheModuleReturns) {
  for (const char* type : {"FrozenBatchNorm2d", "ModuleList"}) {
    const Graph g = chain(kCpu, [&](GraphBuilder& b, ValueId x) {
      auto scope = b.module("norm", type);
      x = b.call1("mul_scalar", {x}, {{"value", 2.0}});
      return b.call1("add_scalar", {x}, {{"value", 1.0}});
    });
    const NodeId linear = node_of(g, "linear");
    const NodeId mul = node_of(g, "mul_scalar");
    const NodeId add = node_of(g, "add_scalar");
    const EventList events = lower_once(g);
    BufferId argument = -1;
    BufferId product = -1;
    std::vector<BufferId> freed_at_add;
    NodeId argument_freed_at = kNone;
    for (const Event& e : events.events) {
      if (e.phase != Phase::kForward || e.iteration != 0) continue;
      if (e.alloc && e.node == linear && argument < 0) argument = e.buffer;
      if (e.alloc && e.node == mul && product < 0) product = e.buffer;
      if (!e.alloc && e.buffer == argument) argument_freed_at = e.node;
      if (!e.alloc && e.node == add) freed_at_add.push_back(e.buffer);
    }
    ASSERT_GE(argument, 0);
    if (std::string_view(type) == "ModuleList") {
      EXPECT_EQ(argument_freed_at, mul);
      continue;
    }
    EXPECT_EQ(argument_freed_at, add);
    EXPECT_EQ(freed_at_add, (std::vector<BufferId>{product, argument}));
  }
}

// GraphBuilder::hold: what the op itself consumed goes first, then the held values in the
// order of the holds (nn.MultiheadAttention's merged mask and q with its function's frame, the
// weights when the caller takes [0], the caller's arguments last).
TEST(GradLayout, HeldValuesGoInTheOrderOfTheirHolds) {
  // add saves nothing, so both operands go at it: in the order of creation when nothing holds
  // them, in the order of the holds when something does.
  for (const bool held : {false, true}) {
    const Graph g = chain(kCpu,
                          [&](GraphBuilder& b, ValueId x) {
                            const ValueId first = b.call1("add_scalar", {x}, {{"value", 1.0}});
                            const ValueId second = b.call1("add_scalar", {x}, {{"value", 2.0}});
                            x = b.call1("add", {first, second});
                            if (held) {
                              b.hold(second);
                              b.hold(first);
                            }
                            return x;
                          },
                          {kB, kE});
    const NodeId sum = node_of(g, "add");
    const NodeId add1 = node_of(g, "add_scalar", 0);
    const NodeId add2 = node_of(g, "add_scalar", 1);
    const EventList events = lower_once(g);
    BufferId b1 = -1, b2 = -1;
    std::vector<BufferId> freed;
    for (const Event& e : events.events) {
      if (e.phase != Phase::kForward || e.iteration != 0) continue;
      if (e.alloc && e.node == add1 && b1 < 0) b1 = e.buffer;
      if (e.alloc && e.node == add2 && b2 < 0) b2 = e.buffer;
      if (!e.alloc && e.node == sum) freed.push_back(e.buffer);
    }
    ASSERT_GE(b1, 0);
    ASSERT_GE(b2, 0);
    EXPECT_EQ(freed, held ? (std::vector<BufferId>{b2, b1}) : (std::vector<BufferId>{b1, b2}));
  }
}

TEST(GradLayout, BmmMakesMat2sGradientFirst) {
  // derivatives.yaml's formulas run in sorted order of their names: mat2 before self.
  const Graph g = chain(kCpu, [](GraphBuilder& b, ValueId x) {
    const ValueId a = b.call1("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
    const ValueId w = b.call1("linear", {a}, {{"out_features", int64_t{2}}});  // (B, L, 2)
    const ValueId wt = b.call1("transpose", {w}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
    return b.call1("bmm", {wt, a});  // (B, 2, L) @ (B, L, E)
  });
  const std::vector<Alloc> allocs = backward_allocs(g, false);
  const NodeId bmm = node_of(g, "bmm");
  std::vector<int64_t> sizes;
  for (const Alloc& a : allocs) {
    if (a.node == bmm) sizes.push_back(a.bytes);
  }
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], kB * kL * kE * 4);  // mat2 (B, L, E)
  EXPECT_EQ(sizes[1], kB * 2 * kL * 4);   // self (B, 2, L)
}

// FiLM's scale * out (Diffusion Policy's U-Net): the formulas run other's before self's, and the
// engine sums the broadcast scale's full-size product down to its shape once both have run,
// then frees the product; the H100 recording of Diffusion makes out's gradient, the product,
// the sum, and frees the second block. Event order as 1.13 makes it on the CPU too.
TEST(GradLayout, MulSumsABroadcastInputsGradientAfterItsFormulas) {
  for (const KernelTarget target : {kCpu, kCuda}) {
    const Graph g = chain(target, [](GraphBuilder& b, ValueId x) {
      const ValueId scale = b.call1("sum", {x}, {{"dims", Dims{0}}, {"keepdim", true}});
      return b.call1("mul", {scale, x});  // (1, B, E) * (L, B, E)
    });
    const NodeId mul = node_of(g, "mul");
    const EventList events = lower_once(g);
    std::vector<std::pair<bool, int64_t>> at_mul;  // (alloc, bytes)
    std::vector<BufferId> buffers;
    for (const Event& e : events.events) {
      if (e.node != mul || e.phase != Phase::kBackward) continue;
      at_mul.emplace_back(e.alloc, events.buffers[e.buffer].bytes);
      buffers.push_back(e.buffer);
    }
    constexpr int64_t kFull = kL * kB * kE * 4;
    ASSERT_GE(at_mul.size(), 4U);
    EXPECT_EQ(at_mul[0], std::make_pair(true, kFull));        // out's gradient
    EXPECT_EQ(at_mul[1], std::make_pair(true, kFull));        // scale's product
    EXPECT_EQ(at_mul[2], std::make_pair(true, kB * kE * 4));  // summed to (1, B, E)
    EXPECT_EQ(at_mul[3], std::make_pair(false, kFull));       // the product goes
    EXPECT_EQ(buffers[3], buffers[1]);
  }
}

TEST(GradLayout, HeldValuesLiveUntilTheNodeThatHoldsThem) {
  ValueId held = kNone;
  const Graph g = chain(kCpu,
                        [&](GraphBuilder& b, ValueId x) {
                          held = b.call1("add_scalar", {x}, {{"value", 1.0}});  // saved by nothing
                          x = b.call1("mul_scalar", {held}, {{"value", 2.0}});
                          x = b.call1("mul_scalar", {x}, {{"value", 3.0}});
                          b.hold(held);
                          return x;
                        },
                        {kB, kE});
  const EventList events = lower_once(g);
  // Without the hold, add_scalar's output would go once the first mul_scalar has read it.
  const NodeId made = node_of(g, "add_scalar");
  std::vector<NodeId> freed_at;
  for (const Event& e : events.events) {
    const Buffer& buf = events.buffers[e.buffer];
    if (!e.alloc && e.phase == Phase::kForward && buf.node == made) freed_at.push_back(e.node);
  }
  EXPECT_EQ(freed_at, std::vector<NodeId>{node_of(g, "mul_scalar", 1)});
}

TEST(GradLayout, CudaDropoutMakesItsMaskBeforeItsOutput) {
  const Graph g = chain(kCuda,
                        [](GraphBuilder& b, ValueId x) {
                          return b.call1("dropout", {x}, {{"p", 0.1}});
                        },
                        {kB, kE});
  const EventList events = lower_once(g);
  const NodeId dropout = node_of(g, "dropout");
  std::vector<int64_t> sizes;
  for (const Event& e : events.events) {
    if (e.alloc && e.phase == Phase::kForward && e.node == dropout) {
      sizes.push_back(events.buffers[e.buffer].bytes);
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{kB * kE, kB * kE * 4}));
}

}  // namespace
}  // namespace trainfit
