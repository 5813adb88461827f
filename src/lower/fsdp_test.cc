#include <gtest/gtest.h>

#include "graph/builder.h"
#include "lower/lowering.h"
#include "lower/replay_test_util.h"

namespace trainfit {
namespace {

constexpr KernelTarget kCpu{Device::kCpu, TorchVersion::k1_13};

// x (8, 1000) -> Linear 1000 -> ReLU -> Linear 1000 -> ReLU -> Linear 10 -> sum, as
// nn.Sequential: modules "0", "2" and "4" hold 1,001,000, 1,001,000 and 10,010 parameters.
Graph three_linears(KernelTarget target, Precision precision = Precision::kFp32) {
  BuildOptions o;
  o.target = target;
  o.precision = precision;
  GraphBuilder b("mlp", o);
  ValueId x =
      b.input("x", {8, 1000}, precision == Precision::kBf16 ? DType::kBFloat16 : DType::kFloat32);
  {
    auto root = b.module("", "Sequential");
    const std::array<int64_t, 3> widths = {1000, 1000, 10};
    for (size_t i = 0; i < widths.size(); ++i) {
      {
        auto m = b.module(std::to_string(2 * i), "Linear");
        x = b.call1("linear", {x}, {{"out_features", widths[i]}});
      }
      if (i + 1 < widths.size()) {
        auto m = b.module(std::to_string(2 * i + 1), "ReLU");
        x = b.call1("relu", {x});
      }
    }
  }
  b.set_loss(b.call1("sum", {x}));
  return *std::move(b).finish();
}

TrainingConfig fsdp(int world, std::vector<std::string> wrap,
                    FsdpSharding sharding = FsdpSharding::kFullShard) {
  TrainingConfig c;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.distributed.world_size = world;
  c.distributed.strategy = Strategy::kFsdp;
  c.distributed.fsdp.wrap = std::move(wrap);
  c.distributed.fsdp.sharding = sharding;
  return c;
}

TEST(FsdpLowering, UnitsFlattenPadAndShard) {
  const Result<EventList> two =
      lower_training_step(three_linears(kCpu), fsdp(2, {"0", "2", "4"}), {});
  ASSERT_TRUE(two.ok()) << two.status().message();
  // The root holds no parameters of its own: three units, in module order.
  ASSERT_EQ(two->fsdp.size(), 3u);
  EXPECT_EQ(two->fsdp[0].path, "0");
  EXPECT_EQ(two->fsdp[0].flat_bytes, 4004000);
  EXPECT_EQ(two->fsdp[0].shard_bytes, 2002000);
  EXPECT_EQ(two->fsdp[2].padded_bytes, 40040);
  // Over three ranks 1,001,000 elements pad to 1,001,001: shards of 333,667.
  const Result<EventList> three =
      lower_training_step(three_linears(kCpu), fsdp(3, {"0", "2", "4"}), {});
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->fsdp[0].shard_bytes, 333667 * 4);
  EXPECT_EQ(three->fsdp[0].padded_bytes, 1001001 * 4);
  // Without a wrap policy the whole model is the root unit.
  const Result<EventList> root = lower_training_step(three_linears(kCpu), fsdp(2, {}), {});
  ASSERT_TRUE(root.ok());
  ASSERT_EQ(root->fsdp.size(), 1u);
  EXPECT_EQ(root->fsdp[0].path, "");
  EXPECT_EQ(root->fsdp[0].flat_bytes, (1001000 * 2 + 10010) * 4);
}

// PyTorch 1.13's FSDP on two gloo ranks (validation/fsdp_mlp.py, with check_fsdp.py's CPU
// stand-ins for its streams and collectives) ran this model, each Linear wrapped, FULL_SHARD, SGD,
// two iterations, the batch and the model's output held through each: rank 0's live tensor bytes
// peaked at 18,090,368 in the first backward, as the first Linear's gradients were flattened
// (torch.cat): its gathered parameters, its weight's gradient and the flat gradient, 4,004,000
// bytes each, over the shards and what autograd keeps. The other phases peak as measured too.
TEST(FsdpLowering, PeakAsMeasuredOnTwoRanks) {
  const Result<EventList> list =
      lower_training_step(three_linears(kCpu), fsdp(2, {"0", "2", "4"}), {});
  ASSERT_TRUE(list.ok());
  const Replayed r = replay(*list);
  EXPECT_EQ(r.peak_phase, Phase::kBackward);
  EXPECT_EQ(r.peak, 18090368);
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kSetup)], 14054040);
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kForward)], 8124596);
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kOptimizer)], 8080656);
}

// The same run under MixedPrecision(param_dtype=reduce_dtype=buffer_dtype=torch.bfloat16), x in
// fp32: the peak of each phase as validation/fsdp_mlp.py measured it. Construction peaks highest
// (the fp32 parameters, the flat parameter and its shard); backward gathers, flattens and reduces
// in bf16, and casts each reduced shard to fp32 for SGD.
TEST(FsdpLowering, MixedPrecisionPhasePeaksAsMeasuredOnTwoRanks) {
  TrainingConfig c = fsdp(2, {"0", "2", "4"});
  c.distributed.fsdp.mixed_precision_bf16 = true;
  const Result<EventList> list = lower_training_step(three_linears(kCpu, Precision::kBf16), c, {});
  ASSERT_TRUE(list.ok()) << list.status().message();
  // Gathered in bf16, sharded in fp32.
  EXPECT_EQ(list->fsdp[0].padded_bytes, 1001000 * 2);
  EXPECT_EQ(list->fsdp[0].shard_bytes, 500500 * 4);
  const Replayed r = replay(*list);
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kSetup)], 14054040);
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kForward)], 8060308);
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kBackward)], 13085492);
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kOptimizer)], 8080494);
}

TEST(FsdpLowering, ShardGradOpKeepsUnitsGatheredFromForwardToBackward) {
  const Graph g = three_linears(kCpu);
  const Replayed full = replay(*lower_training_step(g, fsdp(2, {"0", "2", "4"}), {}));
  const Replayed kept =
      replay(*lower_training_step(g, fsdp(2, {"0", "2", "4"}, FsdpSharding::kShardGradOp), {}));
  // FULL_SHARD's forward holds one unit gathered at a time; SHARD_GRAD_OP ends forward with
  // all three: at least the other large unit's 4,004,000 bytes more.
  const int64_t more = kept.phase_peak[static_cast<size_t>(Phase::kForward)] -
                       full.phase_peak[static_cast<size_t>(Phase::kForward)];
  EXPECT_GT(more, 4004000);
  EXPECT_GT(kept.peak, full.peak);
}

TEST(FsdpLowering, EveryBufferIsFreedAndOnlyShardsRemain) {
  const Result<EventList> list = lower_training_step(three_linears(kCpu), fsdp(2, {"0", "2"}), {});
  ASSERT_TRUE(list.ok());
  const Replayed r = replay(*list);
  // The root keeps the last Linear's parameters: 10,010 elements, 5,005 per rank.
  EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kParameter)], 2 * 2002000 + 5005 * 4);
  EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kGradient)], 0);
  EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kCommunication)], 0);
}

TEST(FsdpLowering, WrapPatternsMustMatchAndMustNotNest) {
  const Graph g = three_linears(kCpu);
  const Result<EventList> none = lower_training_step(g, fsdp(2, {"encoder.*"}), {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("matches no module"), std::string::npos);
  const Result<EventList> nested = lower_training_step(g, fsdp(2, {"0", ""}), {});
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("nested"), std::string::npos);
}

}  // namespace
}  // namespace trainfit
