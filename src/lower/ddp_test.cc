#include "lower/ddp.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "graph/builder.h"
#include "lower/lowering.h"
#include "lower/replay_test_util.h"

namespace trainfit {
namespace {

constexpr KernelTarget kCpu{Device::kCpu, TorchVersion::k1_13};

// The model of the DDP measurements below: x (64, 512) -> Linear 1024 -> BatchNorm1d -> ReLU ->
// Linear 600 -> Linear 10 -> cross_entropy. Its parameters in parameters() order (bytes):
// fc1.weight 2097152, fc1.bias 4096, bn.weight 4096, bn.bias 4096, fc2.weight 2457600,
// fc2.bias 2400, fc3.weight 24000, fc3.bias 40.
Graph mlp_bn(KernelTarget target) {
  BuildOptions o;
  o.target = target;
  GraphBuilder b("mlp_bn", o);
  ValueId x = b.input("x", {64, 512}, DType::kFloat32);
  const ValueId y = b.input("y", {64}, DType::kInt64);
  {
    auto root = b.module("", "Sequential");
    {
      auto m = b.module("0", "Linear");
      x = b.call1("linear", {x}, {{"out_features", int64_t{1024}}});
    }
    {
      auto m = b.module("1", "BatchNorm1d");
      x = b.call1("batch_norm", {x});
    }
    x = b.call1("relu", {x});
    {
      auto m = b.module("3", "Linear");
      x = b.call1("linear", {x}, {{"out_features", int64_t{600}}});
    }
    {
      auto m = b.module("4", "Linear");
      x = b.call1("linear", {x}, {{"out_features", int64_t{10}}});
    }
  }
  b.set_loss(b.call1("cross_entropy", {x, y}));
  return *std::move(b).finish();
}

const std::vector<int64_t> kParamBytes = {2097152, 4096, 4096, 4096, 2457600, 2400, 24000, 40};

std::vector<BucketTensor> tensors(const std::vector<int32_t>& order) {
  std::vector<BucketTensor> t;
  t.reserve(order.size());
  for (int32_t i : order) t.push_back({i, kParamBytes[static_cast<size_t>(i)], DType::kFloat32});
  return t;
}

std::vector<int64_t> bytes_of(const std::vector<GradientBucket>& buckets) {
  std::vector<int64_t> out;
  out.reserve(buckets.size());
  for (const GradientBucket& b : buckets) out.push_back(b.bytes);
  return out;
}

// The sizes DDP logged for this model under PyTorch 1.13 (gloo, CPU):
// _get_ddp_logging_data()["bucket_sizes"] and ["rebuilt_bucket_sizes"].
TEST(DdpBuckets, OneBucketPerDtypeBeforeTheRebuild) {
  const auto b = assign_buckets(tensors({0, 1, 2, 3, 4, 5, 6, 7}), std::array{kNoBucketLimit},
                                BucketOrder::kByFirstIndex);
  EXPECT_EQ(bytes_of(b), (std::vector<int64_t>{4593480}));
}

TEST(DdpBuckets, FindUnusedParametersKeepsParameterOrder) {
  // The first 1 MiB bucket takes the first parameter (whose gradient comes last); DDP then
  // reverses the list: logged as "2496328, 2097152".
  auto b = assign_buckets(tensors({0, 1, 2, 3, 4, 5, 6, 7}),
                          std::array{kDdpFirstBucketBytes, kDdpBucketCapBytes},
                          BucketOrder::kByFirstIndex);
  std::reverse(b.begin(), b.end());
  EXPECT_EQ(bytes_of(b), (std::vector<int64_t>{2496328, 2097152}));
}

TEST(DdpBuckets, RebuiltInGradientReadyOrder) {
  // Gradients become ready from the last layer back: logged as "2484040, 2109440".
  const auto b =
      assign_buckets(tensors({7, 6, 5, 4, 3, 2, 1, 0}),
                     std::array{kDdpFirstBucketBytes, kDdpBucketCapBytes}, BucketOrder::kAsClosed);
  EXPECT_EQ(bytes_of(b), (std::vector<int64_t>{2484040, 2109440}));
  EXPECT_EQ(b[0].tensors, (std::vector<int32_t>{7, 6, 5, 4}));
}

TEST(DdpBuckets, ABucketOvershootsByOneTensorAndDtypesNeverMix) {
  const std::vector<BucketTensor> t = {{0, 600, DType::kFloat32},
                                       {1, 600, DType::kBFloat16},
                                       {2, 600, DType::kFloat32},
                                       {3, 100, DType::kFloat32}};
  const auto b = assign_buckets(t, std::array<int64_t, 1>{1000}, BucketOrder::kByFirstIndex);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].tensors, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(b[0].bytes, 1200);
  EXPECT_EQ(b[1].tensors, (std::vector<int32_t>{1}));
  EXPECT_EQ(b[2].tensors, (std::vector<int32_t>{3}));
}

TrainingConfig ddp(DdpConfig cfg = {}) {
  TrainingConfig c;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.distributed.world_size = 2;
  c.distributed.strategy = Strategy::kDdp;
  c.distributed.ddp = cfg;
  return c;
}

TEST(DdpLowering, BucketsAreASecondCopyOfTheGradients) {
  const Graph g = mlp_bn(kCpu);
  TrainingConfig plain;
  plain.optimizer.kind = OptimizerKind::kSgd;
  const Replayed single = replay(*lower_training_step(g, plain, {}));
  const Result<EventList> events = lower_training_step(g, ddp(), {});
  ASSERT_TRUE(events.ok()) << events.status().to_string();
  ASSERT_TRUE(events->ddp.has_value());
  EXPECT_EQ(bytes_of(events->ddp->buckets), (std::vector<int64_t>{4593480}));
  EXPECT_EQ(bytes_of(events->ddp->rebuilt), (std::vector<int64_t>{2484040, 2109440}));
  const Replayed r = replay(*events);
  // The buckets stay; the peak (end of backward, every gradient alive) grows by them.
  EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kCommunication)], 4593480);
  EXPECT_EQ(r.peak - single.peak, 4593480);
}

TEST(DdpLowering, GradientAsBucketViewKeepsOneCopy) {
  const Graph g = mlp_bn(kCpu);
  DdpConfig view;
  view.gradient_as_bucket_view = true;
  const Result<EventList> events = lower_training_step(g, ddp(view), {});
  ASSERT_TRUE(events.ok()) << events.status().to_string();
  const Replayed r = replay(*events);
  // The buckets are the gradients and outlive zero_grad(set_to_none=True); nothing else is left.
  EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kGradient)], 4593480);
  EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kCommunication)], 0);
  const Replayed copy = replay(*lower_training_step(g, ddp(), {}));
  EXPECT_LT(r.peak, copy.peak);
}

TEST(DdpLowering, FindUnusedParametersNeverRebuilds) {
  const Graph g = mlp_bn(kCpu);
  DdpConfig unused;
  unused.find_unused_parameters = true;
  const Result<EventList> events = lower_training_step(g, ddp(unused), {});
  ASSERT_TRUE(events.ok()) << events.status().to_string();
  EXPECT_EQ(bytes_of(events->ddp->buckets), (std::vector<int64_t>{2496328, 2097152}));
  EXPECT_TRUE(events->ddp->rebuilt.empty());
  // Plus local_used_map_ and its copy: an int32 per parameter each.
  EXPECT_EQ(replay(*events).live_at_end[static_cast<size_t>(Category::kCommunication)],
            4593480 + 2 * 8 * 4);
}

TEST(DdpLowering, GradientAccumulationBalances) {
  const Graph g = mlp_bn(kCpu);
  for (bool view : {false, true}) {
    DdpConfig cfg;
    cfg.gradient_as_bucket_view = view;
    TrainingConfig c = ddp(cfg);
    c.grad_accum = 3;
    const Result<EventList> events = lower_training_step(g, c, {});
    ASSERT_TRUE(events.ok()) << events.status().to_string();
    const Replayed r = replay(*events);
    EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kActivation)], 0);
    EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kTemporary)], 0);
    EXPECT_EQ(r.live_at_end[static_cast<size_t>(Category::kGradient)] +
                  r.live_at_end[static_cast<size_t>(Category::kCommunication)],
              4593480);
  }
}

TEST(DdpLowering, AParameterWithoutAGradientNeedsFindUnusedParameters) {
  GraphBuilder b("unused", {});
  ValueId x = b.input("x", {4, 8}, DType::kFloat32);
  {
    auto root = b.module("", "M");
    {
      auto used = b.module("used", "Linear");
      x = b.call1("linear", {x}, {{"out_features", int64_t{4}}});
    }
    {
      auto spare = b.module("spare", "Linear");
      b.call1("linear", {b.input("z", {4, 8}, DType::kFloat32)}, {{"out_features", int64_t{4}}});
    }
  }
  b.set_loss(b.call1("sum", {x}));
  const Graph g = *std::move(b).finish();
  const Result<EventList> events = lower_training_step(g, ddp(), {});
  ASSERT_FALSE(events.ok());
  EXPECT_NE(events.status().message().find("spare.weight gets no gradient"), std::string::npos)
      << events.status().message();
  DdpConfig unused;
  unused.find_unused_parameters = true;
  EXPECT_TRUE(lower_training_step(g, ddp(unused), {}).ok());
}

// ZeroRedundancyOptimizer._partition_parameters, worked by hand: largest first, each to the
// rank with the fewest elements so far (the lower rank on a tie).
TEST(ZeroRedundancy, PartitionIsGreedyLargestFirst) {
  const std::vector<ShardParam> params = {
      {0, 10, 0}, {1, 40, 0}, {2, 30, 0}, {3, 20, 0}, {4, 5, 0}};
  // 40 -> r0 (40, 0); 30 -> r1 (40, 30); 20 -> r1 (40, 50); 10 -> r0 (50, 50); 5 -> r0.
  EXPECT_EQ(zero_redundancy_partition(params, 2),
            (std::vector<std::vector<int32_t>>{{1, 0, 4}, {2, 3}}));
  // Equal sizes keep their order; one rank takes everything.
  const std::vector<ShardParam> equal = {{0, 8, 0}, {1, 8, 0}, {2, 8, 0}};
  EXPECT_EQ(zero_redundancy_partition(equal, 2), (std::vector<std::vector<int32_t>>{{0, 2}, {1}}));
  EXPECT_EQ(zero_redundancy_partition(equal, 1), (std::vector<std::vector<int32_t>>{{0, 1, 2}}));
}

TEST(ZeroRedundancy, GroupsPartitionInTurnWithCountsCarriedOver) {
  // Group 0: 40 -> r0, 10 -> r1; group 1: 30 -> r1 (10 < 40).
  const std::vector<ShardParam> params = {{0, 10, 0}, {1, 40, 0}, {2, 30, 1}};
  EXPECT_EQ(zero_redundancy_partition(params, 2), (std::vector<std::vector<int32_t>>{{1}, {0, 2}}));
}

// mlp_bn over two ranks: fc2.weight (614,400 elements) is rank 0's shard, everything else
// (533,970) rank 1's, so rank 0 keeps Adam's state for that one parameter.
TEST(ZeroRedundancy, RankZeroKeepsStateForItsShardOnly) {
  const Graph g = mlp_bn(kCpu);
  TrainingConfig c = ddp();
  c.optimizer.kind = OptimizerKind::kAdam;
  const Replayed full = replay(*lower_training_step(g, c, {}));
  c.distributed.strategy = Strategy::kZero1;
  const Result<EventList> events = lower_training_step(g, c, {});
  ASSERT_TRUE(events.ok()) << events.status().to_string();
  EXPECT_EQ(events->ddp->shard_elements, (std::vector<int64_t>{614400, 533970}));
  const Replayed zero = replay(*events);
  constexpr auto kState = static_cast<size_t>(Category::kOptimizerState);
  // Adam keeps exp_avg, exp_avg_sq and a step counter per parameter.
  const int64_t step_bytes = (full.live_at_end[kState] - int64_t{2} * 4593480) / 8;
  EXPECT_EQ(zero.live_at_end[kState], int64_t{2} * 2457600 + step_bytes);
  // The reducer's buckets are DDP's.
  EXPECT_EQ(zero.live_at_end[static_cast<size_t>(Category::kCommunication)],
            full.live_at_end[static_cast<size_t>(Category::kCommunication)]);
  // One rank owns every parameter: DDP's state. The step runs largest first, though, so the
  // for-loop Adam holds fc2.weight's denom while it steps fc1.weight: a higher transient peak.
  c.distributed.world_size = 1;
  const Replayed one = replay(*lower_training_step(g, c, {}));
  EXPECT_EQ(one.live_at_end[kState], full.live_at_end[kState]);
  EXPECT_GT(one.peak, full.peak);
}

}  // namespace
}  // namespace trainfit
