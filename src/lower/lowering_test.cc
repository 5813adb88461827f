#include "lower/lowering.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "graph/builder.h"
#include "lower/optimizer_step.h"
#include "lower/replay_test_util.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

constexpr KernelTarget kCpu{Device::kCpu, TorchVersion::k1_13};
constexpr KernelTarget kCuda{Device::kCuda, TorchVersion::k2};

// x (B, 1024) -> linear 1024x1024 -> relu -> linear 1024x10 -> cross_entropy
Graph mlp(KernelTarget target, int64_t batch = 4, std::vector<std::string> freeze = {}) {
  BuildOptions o;
  o.target = target;
  o.freeze = std::move(freeze);
  GraphBuilder b("mlp", o);
  ValueId x = b.input("x", {batch, 1024}, DType::kFloat32);
  const ValueId y = b.input("y", {batch}, DType::kInt64);
  {
    auto root = b.module("", "MLP");
    {
      auto fc1 = b.module("fc1", "Linear");
      x = b.call1("linear", {x}, {{"out_features", int64_t{1024}}});
    }
    x = b.call1("relu", {x});
    {
      auto fc2 = b.module("fc2", "Linear");
      x = b.call1("linear", {x}, {{"out_features", int64_t{10}}});
    }
  }
  {
    auto loss = b.module("loss", "CrossEntropyLoss");
    b.set_loss(b.call1("cross_entropy", {x, y}));
  }
  return *std::move(b).finish();
}

TrainingConfig with(OptimizerKind kind, OptimizerImpl impl = OptimizerImpl::kDefault) {
  TrainingConfig c;
  c.optimizer.kind = kind;
  c.optimizer.impl = impl;
  return c;
}

constexpr int64_t kW1 = int64_t{1024} * 1024 * 4;  // fc1.weight
constexpr int64_t kBias1 = int64_t{1024} * 4;
constexpr int64_t kParams = kW1 + kBias1 + int64_t{1024} * 10 * 4 + int64_t{10} * 4;

TEST(Lowering, EveryModelAndConfigurationBalances) {
  for (const ModelSpec& m : model_zoo()) {
    ModelRequest r;
    r.name = m.name;
    r.batch = 2;
    if (m.input == InputKind::kSequence) r.seq_len = 32;
    if (m.name == "vgg19" || m.name == "vgg19_bn" || m.name == "vit_l_16" || m.name == "gpt2-large")
      continue;
    for (KernelTarget t : {kCpu, kCuda}) {
      r.options.target = t;
      const Graph g = *build_model(r);
      for (OptimizerKind k :
           {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam}) {
        SCOPED_TRACE(m.name);
        TrainingConfig c = with(k);
        c.grad_accum = 2;
        const Result<EventList> events = lower_training_step(g, c, {});
        ASSERT_TRUE(events.ok()) << events.status().to_string();
        const Replayed rp = replay(*events);
        // After two steps only parameters and optimizer state are left.
        for (int cat = 0; cat < kCategoryCount; ++cat) {
          const auto c2 = static_cast<Category>(cat);
          if (c2 == Category::kParameter || c2 == Category::kOptimizerState) continue;
          EXPECT_EQ(rp.live_at_end[static_cast<size_t>(cat)], 0) << category_name(c2);
        }
      }
    }
  }
}

TEST(Lowering, ForLoopAdamHoldsTwoCopiesOfTheLargestParameter) {
  const Graph g = mlp(kCpu);
  const Replayed loop =
      replay(*lower_training_step(g, with(OptimizerKind::kAdam, OptimizerImpl::kLoop), {}));
  // At fc1.weight's step: parameters, gradients, exp_avg and exp_avg_sq, sqrt and the division.
  EXPECT_EQ(loop.peak_phase, Phase::kOptimizer);
  EXPECT_GE(loop.phase_peak[static_cast<size_t>(Phase::kOptimizer)], 4 * kParams + 2 * kW1);
  EXPECT_LT(loop.phase_peak[static_cast<size_t>(Phase::kOptimizer)],
            4 * kParams + 2 * kW1 + int64_t{64} * 1024);
}

TEST(Lowering, ForeachAdamHoldsOneCopyOfEveryParameter) {
  const Graph g = mlp(kCuda);
  const Replayed foreach =
      replay(*lower_training_step(g, with(OptimizerKind::kAdam, OptimizerImpl::kForeach), {}));
  const Replayed fused =
      replay(*lower_training_step(g, with(OptimizerKind::kAdam, OptimizerImpl::kFused), {}));
  const auto opt = static_cast<size_t>(Phase::kOptimizer);
  EXPECT_EQ(foreach.phase_peak[opt] - fused.phase_peak[opt], kParams);
}

TEST(Lowering, MomentumStateAppearsAtTheFirstStep) {
  const Graph g = mlp(kCpu);
  const Replayed sgd = replay(*lower_training_step(g, with(OptimizerKind::kSgd), {}));
  const Replayed momentum = replay(*lower_training_step(g, with(OptimizerKind::kMomentum), {}));
  EXPECT_EQ(sgd.live_at_end[static_cast<size_t>(Category::kOptimizerState)], 0);
  EXPECT_EQ(momentum.live_at_end[static_cast<size_t>(Category::kOptimizerState)], kParams);
}

TEST(Lowering, FrozenLayersGetNoGradients) {
  const Graph g = mlp(kCpu, 4, {"fc1"});
  const EventList events = *lower_training_step(g, with(OptimizerKind::kAdam), {});
  int64_t grads = 0;
  for (const Event& e : events.events) {
    const Buffer& b = events.buffers[e.buffer];
    if (e.alloc && b.category == Category::kGradient && e.iteration == 0) grads += b.bytes;
  }
  EXPECT_EQ(grads, kParams - kW1 - kBias1);
}

TEST(Lowering, GradientAccumulationAddsIntoTheFirstGradients) {
  const Graph g = mlp(kCpu);
  TrainingConfig c = with(OptimizerKind::kSgd);
  c.grad_accum = 3;
  c.iterations = 1;
  const EventList events = *lower_training_step(g, c, {});
  int64_t grads = 0;
  for (const Event& e : events.events) {
    const Buffer& b = events.buffers[e.buffer];
    if (e.alloc && b.category == Category::kGradient) grads += b.bytes;
  }
  EXPECT_EQ(grads, kParams);  // later micro-batches' gradients are temporaries, added in place
}

// zero_grad(set_to_none=False): the gradients are made once, in the first backward, live to
// the end, and the second backward adds into them (its gradients are temporaries).
TEST(Lowering, KeptGradientsAreMadeOnceAndLiveToTheEnd) {
  const Graph g = mlp(kCpu);
  TrainingConfig c = with(OptimizerKind::kSgd);
  c.switches.zero_grad_set_to_none = false;
  const EventList events = *lower_training_step(g, c, {});
  int64_t grads = 0;
  for (const Event& e : events.events) {
    const Buffer& b = events.buffers[e.buffer];
    if (e.alloc && b.category == Category::kGradient) {
      grads += b.bytes;
      EXPECT_EQ(e.iteration, 0);
    }
  }
  EXPECT_EQ(grads, kParams);
  EXPECT_EQ(replay(events).live_at_end[static_cast<size_t>(Category::kGradient)], kParams);
  const Replayed freed = replay(*lower_training_step(g, with(OptimizerKind::kSgd), {}));
  EXPECT_EQ(freed.live_at_end[static_cast<size_t>(Category::kGradient)], 0);
}

TEST(Lowering, RefusesMoreMicroBatchesThanItCanReplay) {
  const Graph g = mlp(kCpu);
  TrainingConfig c = with(OptimizerKind::kSgd);
  const auto ops = static_cast<int64_t>(g.nodes.size());
  c.grad_accum = static_cast<int>(kMaxLoweredOps / ops + 1);
  const Result<EventList> events = lower_training_step(g, c, {});
  ASSERT_FALSE(events.ok());
  EXPECT_NE(events.status().to_string().find(
                fmt::format("use --grad-accum {} or fewer", kMaxLoweredOps / ops)),
            std::string::npos)
      << events.status().to_string();
}

// Liger's fused linear cross-entropy over 100 tokens of 16 and a vocabulary of 64: chunks of
// next_power_of_2(ceil(100 / ceil(64 / 16))) = 32 tokens, three full and one of 4.
TEST(Lowering, LigerLossMakesItsGradientsInForwardAChunkAtATime) {
  BuildOptions o;
  o.target = kCpu;
  GraphBuilder b("head", o);
  const ValueId x = b.input("x", {100, 16}, DType::kFloat32, true);
  const ValueId y = b.input("y", {100}, DType::kInt64);
  ValueId loss = kNone;
  {
    auto head = b.module("", "Head");
    loss = b.call1("fused_linear_cross_entropy", {x, y}, {{"vocab_size", int64_t{64}}});
  }
  b.set_loss(loss);
  const Graph g = *std::move(b).finish();
  TrainingConfig c = with(OptimizerKind::kSgd);
  c.iterations = 1;
  const EventList events = *lower_training_step(g, c, {});
  const Replayed r = replay(events);
  constexpr int64_t kWeight = int64_t{64} * 16 * 4;
  constexpr int64_t kBatch = int64_t{100} * 16 * 4 + int64_t{100} * 8;
  // Kept from forward: the weight's gradient and the input's.
  constexpr int64_t kGrads = kWeight + int64_t{100} * 16 * 4;
  // loss_1d (fp32) and the mask of counted tokens, then two chunks of logits (32 x 64 fp32)
  // while the second one's kernel runs.
  constexpr int64_t kForward = int64_t{100} * 4 + 100 + 2 * (int64_t{32} * 64 * 4);
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kForward)],
            kWeight + kBatch + kGrads + kForward);
  // The backward hands the saved gradients on: nothing beyond the loss and its seed.
  EXPECT_EQ(r.phase_peak[static_cast<size_t>(Phase::kBackward)], kWeight + kBatch + kGrads + 8);
  int64_t grads = 0;
  for (const Event& e : events.events) {
    const Buffer& buf = events.buffers[e.buffer];
    if (e.alloc && buf.category == Category::kGradient) grads += buf.bytes;
  }
  EXPECT_EQ(grads, kWeight);
}

TEST(Lowering, CheckpointingKeepsOnlyTheSegmentInput) {
  ModelRequest r;
  r.name = "resnet50";
  r.batch = 2;
  r.options.target = kCpu;
  const Graph g = *build_model(r);
  const Replayed plain = replay(*lower_training_step(g, with(OptimizerKind::kSgd), {}));
  TrainingConfig c = with(OptimizerKind::kSgd);
  c.checkpoint = {"layer1.*", "layer2.*", "layer3.*"};
  const Replayed ckpt = replay(*lower_training_step(g, c, {}));
  // Forward memory above the parameters: layer1-3 hold most of resnet50's activations.
  const int64_t params = plain.live_at_end[static_cast<size_t>(Category::kParameter)];
  const auto fwd = static_cast<size_t>(Phase::kForward);
  EXPECT_LT(ckpt.phase_peak[fwd] - params, (plain.phase_peak[fwd] - params) / 2);
  EXPECT_LT(ckpt.peak, plain.peak);
}

// use_reentrant=True recomputes the whole segment and holds the recomputed output and its
// gradient while the segment's backward runs: never less than non-reentrant checkpointing, and
// on PyTorch 2.x (which stops recomputing at the last kept tensor) more recomputed FLOPs.
TEST(Lowering, ReentrantCheckpointingHoldsTheOutputAndRecomputesEverything) {
  ModelRequest r;
  r.name = "llama";
  r.batch = 2;
  r.seq_len = 64;
  r.sets = {{"num_hidden_layers", "2"},   {"vocab_size", "32"},
            {"hidden_size", "64"},        {"intermediate_size", "160"},
            {"num_attention_heads", "4"}, {"num_key_value_heads", "2"},
            {"use_cache", "false"}};
  r.options.target = kCuda;
  const Graph g = *build_model(r);
  TrainingConfig c = with(OptimizerKind::kAdamW);
  c.checkpoint = {"model.layers.*"};
  const Replayed plain = replay(*lower_training_step(g, c, {}));
  c.checkpoint_reentrant = true;
  const Replayed reentrant = replay(*lower_training_step(g, c, {}));
  EXPECT_GT(reentrant.peak, plain.peak);
  const Result<std::vector<CheckpointSegment>> segments =
      checkpoint_segments(g, c.checkpoint, /*reentrant=*/true);
  ASSERT_TRUE(segments.ok());
  ASSERT_EQ(segments->size(), 2U);
  for (const CheckpointSegment& s : *segments) {
    EXPECT_EQ(s.recompute_stop, s.end - 1);
    ASSERT_EQ(s.outputs.size(), 1U);  // the layer's hidden state
  }
  const Result<std::vector<CheckpointSegment>> early = checkpoint_segments(g, c.checkpoint);
  ASSERT_TRUE(early.ok());
  EXPECT_LT(early->front().recompute_stop, early->front().end - 1);  // the residual add
}

// Under use_reentrant=True a segment none of whose inputs requires grad trains nothing inside it
// (PyTorch warns and gives its parameters no gradients): refused.
TEST(Lowering, ReentrantCheckpointingNeedsAnInputThatRequiresGrad) {
  const Graph g = mlp(kCpu);
  TrainingConfig c = with(OptimizerKind::kSgd);
  c.checkpoint = {"fc1"};
  c.checkpoint_reentrant = true;
  const Result<EventList> first = lower_training_step(g, c, {});
  ASSERT_FALSE(first.ok());
  EXPECT_NE(first.status().message().find("no input of 'fc1' requires grad"), std::string::npos);
  c.checkpoint = {"fc2"};  // takes relu(fc1(x)), which does
  EXPECT_TRUE(lower_training_step(g, c, {}).ok());
}

TEST(Lowering, CheckpointPatternMustMatch) {
  const Graph g = mlp(kCpu);
  TrainingConfig c = with(OptimizerKind::kSgd);
  c.checkpoint = {"encoder.*"};
  const Result<EventList> r = lower_training_step(g, c, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
}

TEST(Lowering, ModulePatterns) {
  EXPECT_TRUE(module_matches("encoder.layers.encoder_layer_3", "encoder.layers.*"));
  EXPECT_FALSE(module_matches("encoder.layers", "encoder.layers.*"));
  EXPECT_FALSE(module_matches("encoder.layers.encoder_layer_3.mlp", "encoder.layers.*"));
  EXPECT_TRUE(module_matches("layer2", "layer2"));
  EXPECT_TRUE(module_matches("layer2.0", "*.0"));
}

TEST(Lowering, CublasWorkspacesAppearOncePerDirection) {
  const Graph g = mlp(kCuda);
  LoweringOptions o;
  o.cublas_workspace_bytes = 8519680;
  const EventList events = *lower_training_step(g, with(OptimizerKind::kSgd), o);
  int workspaces = 0;
  for (const Event& e : events.events) {
    const Buffer& b = events.buffers[e.buffer];
    if (e.alloc && b.category == Category::kWorkspace && b.bytes == o.cublas_workspace_bytes)
      ++workspaces;
  }
  EXPECT_EQ(workspaces, 2);
}

// The forward thread's first addmm with a bias also takes cuBLASLt's workspace, once, after
// the output and the cuBLAS workspace; backward's products take none.
TEST(Lowering, CublasLtWorkspaceOnceOnTheForwardThread) {
  const Graph g = mlp(kCuda);
  LoweringOptions o;
  o.cublas_workspace_bytes = 8519680;
  o.cublaslt_workspace_bytes = 1 << 20;
  const EventList events = *lower_training_step(g, with(OptimizerKind::kSgd), o);
  std::vector<int64_t> order;
  for (const Event& e : events.events) {
    const Buffer& b = events.buffers[e.buffer];
    if (e.alloc && e.phase == Phase::kForward && e.iteration == 0 && order.size() < 4) {
      order.push_back(b.bytes);
    }
  }
  // input, target, fc1's output, then the two workspaces
  ASSERT_EQ(order.size(), 4U);
  int lt = 0;
  for (const Event& e : events.events) {
    if (e.alloc && events.buffers[e.buffer].bytes == (1 << 20)) ++lt;
  }
  EXPECT_EQ(lt, 1);
  int64_t fc1_output_at = -1;
  int64_t cublas_at = -1;
  for (size_t i = 0; i < events.events.size(); ++i) {
    const Event& e = events.events[i];
    const Buffer& b = events.buffers[e.buffer];
    if (!e.alloc || e.iteration != 0 || e.phase != Phase::kForward) continue;
    if (b.bytes == int64_t{4} * 1024 * 4 && fc1_output_at < 0 && b.category != Category::kInput) {
      fc1_output_at = static_cast<int64_t>(i);
    }
    if (b.bytes == o.cublas_workspace_bytes && cublas_at < 0) cublas_at = static_cast<int64_t>(i);
  }
  EXPECT_LT(fc1_output_at, cublas_at);  // the kernel's output first, then its handle
}

// Two bias-free 3x3 convolutions, c1 then c2, of `channels` over (batch, channels, side, side)
// with padding 1, mean-pooled into a cross-entropy loss, built for `target`.
Graph two_convs(KernelTarget target, int64_t batch, int64_t channels, int64_t side) {
  BuildOptions bo;
  bo.target = target;
  GraphBuilder b("convs", bo);
  ValueId x = b.input("x", {batch, channels, side, side}, DType::kFloat32);
  const ValueId y = b.input("y", {batch}, DType::kInt64);
  {
    auto root = b.module("", "Net");
    for (const char* name : {"c1", "c2"}) {
      auto m = b.module(name, "Conv2d");
      x = b.call1("conv2d", {x},
                  {{"out_channels", channels},
                   {"kernel_size", int64_t{3}},
                   {"padding", int64_t{1}},
                   {"bias", false}});
    }
    x = b.call1("mean", {x}, {{"dims", Dims{2, 3}}});
  }
  b.set_loss(b.call1("cross_entropy", {x, y}));
  return *std::move(b).finish();
}

// A convolution's workspaces: forward after its output; backward-data after grad_input and
// backward-filter after grad_weight, each freed before the next is made.
TEST(Lowering, ConvolutionWorkspacesFollowTheirResults) {
  const Graph g = two_convs({Device::kCuda, TorchVersion::k2, 90, 132}, 8, 64, 56);
  LoweringOptions o;
  o.op_workspaces = true;
  const EventList list = *lower_training_step(g, with(OptimizerKind::kSgd), o);
  // The H100's recorded workspaces of this problem (resnet's layer1 convolution at batch 8).
  const int64_t act = int64_t{8} * 64 * 56 * 56 * 4;
  std::vector<std::pair<bool, int64_t>> backward;
  for (const Event& e : list.events) {
    if (e.phase != Phase::kBackward || e.iteration != 0) continue;
    const Buffer& buf = list.buffers[e.buffer];
    if (buf.category == Category::kWorkspace || buf.bytes == act || buf.bytes == 147456) {
      backward.emplace_back(e.alloc, buf.bytes);
    }
  }
  // c2: grad_input, its backward-data workspace (alloc, free), grad_weight, backward-filter's.
  const std::vector<std::pair<bool, int64_t>> c2 = {{true, act},       {true, 12992528},
                                                    {false, 12992528}, {true, 147456},
                                                    {true, 15057575},  {false, 15057575}};
  EXPECT_NE(std::search(backward.begin(), backward.end(), c2.begin(), c2.end()), backward.end());
  // c1's input needs no gradient: backward-filter alone.
  const std::vector<std::pair<bool, int64_t>> c1 = {
      {true, 147456}, {true, 15057575}, {false, 15057575}, {false, act}};
  EXPECT_NE(std::search(backward.begin(), backward.end(), c1.begin(), c1.end()), backward.end());
}

// Benchmark mode: a problem's first call allocates the trial, frees it and empties the cache;
// later calls of the same problem and the second iteration run the cached plan.
TEST(Lowering, BenchmarkModeSearchesEachProblemOnce) {
  const Graph g = two_convs({Device::kCuda, TorchVersion::k2, 80, 108}, 4, 16, 32);
  LoweringOptions o;
  o.op_workspaces = true;
  TrainingConfig c = with(OptimizerKind::kSgd);
  c.switches.cudnn_benchmark = true;
  const EventList list = *lower_training_step(g, c, o);
  int empties = 0;
  for (const Event& e : list.events) {
    if (!e.empty_cache) continue;
    ++empties;
    EXPECT_EQ(e.iteration, 0);
  }
  // forward, backward-data and backward-filter of the one problem (c1's input needs no grad,
  // c2's does): three searches, whatever the calls.
  EXPECT_EQ(empties, 3);
  EXPECT_EQ(list.plan_searches, 3);
  EXPECT_EQ(list.unmeasured_searches, 3);
}

// GradScaler's skipped steps make no optimizer state; the first taken step does.
TEST(Lowering, SkippedScalerStepsMakeNoState) {
  BuildOptions bo;
  bo.target = kCuda;
  bo.precision = Precision::kAmpFp16;
  GraphBuilder b("mlp16", bo);
  ValueId x = b.input("x", {4, 64}, DType::kFloat32);
  const ValueId y = b.input("y", {4}, DType::kInt64);
  {
    auto root = b.module("", "MLP");
    auto fc = b.module("fc", "Linear");
    x = b.call1("linear", {x}, {{"out_features", int64_t{10}}});
  }
  b.set_loss(b.call1("cross_entropy", {x, y}));
  const Graph g = *std::move(b).finish();
  const auto state_by_iteration = [&](int skips) {
    TrainingConfig c = with(OptimizerKind::kAdam);
    c.grad_scaler_skips = skips;
    const EventList list = *lower_training_step(g, c, {});
    std::vector<int> states(2, 0);
    for (const Event& e : list.events) {
      if (e.alloc && list.buffers[e.buffer].category == Category::kOptimizerState &&
          e.phase == Phase::kOptimizer) {
        ++states[e.iteration];
      }
    }
    return states;
  };
  EXPECT_GT(state_by_iteration(0)[0], 0);
  EXPECT_EQ(state_by_iteration(1)[0], 0);
  EXPECT_GT(state_by_iteration(1)[1], 0);  // the first step taken creates it
  EXPECT_EQ(state_by_iteration(2)[0] + state_by_iteration(2)[1], 0);
}

// A scoped loop lets the batch go once autograd is done with it and the output after the loss;
// a held one keeps both to the step's end.
TEST(Lowering, ScopedLoopFreesTheBatchAndOutputEarly) {
  const Graph g = mlp(kCuda);
  const auto input_freed_in = [&](LoopStyle loop) {
    TrainingConfig c = with(OptimizerKind::kSgd);
    c.loop = loop;
    const EventList list = *lower_training_step(g, c, {});
    for (const Event& e : list.events) {
      if (!e.alloc && !e.empty_cache && list.buffers[e.buffer].category == Category::kInput &&
          e.iteration == 0) {
        return e.phase;
      }
    }
    return Phase::kSetup;
  };
  EXPECT_EQ(input_freed_in(LoopStyle::kHeld), Phase::kOptimizer);
  EXPECT_EQ(input_freed_in(LoopStyle::kScoped), Phase::kBackward);  // fc1 keeps x
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

// Records the largest number of temporary bytes alive at once during an optimizer step.
class TemporaryPeak : public EventSink {
 public:
  int32_t alloc(int64_t bytes, Category category, bool, int32_t) override {
    sizes_.push_back(category == Category::kTemporary ? bytes : 0);
    live_ += sizes_.back();
    peak_ = std::max(peak_, live_);
    return static_cast<int32_t>(sizes_.size() - 1);
  }
  void release(int32_t buffer) override { live_ -= sizes_[static_cast<size_t>(buffer)]; }
  int64_t peak() const { return peak_; }

 private:
  std::vector<int64_t> sizes_;
  int64_t live_ = 0;
  int64_t peak_ = 0;
};

// Optimizer.step runs each parameter group on its own: a foreach list temporary spans one
// group (LeRobot ACT's backbone group), not every parameter.
TEST(Lowering, ForeachTemporariesSpanOneParameterGroup) {
  OptimizerStep step;
  step.optimizer.kind = OptimizerKind::kAdam;
  step.optimizer.impl = OptimizerImpl::kForeach;
  step.optimizer.weight_decay = 1e-6;  // a gradient copy per parameter, then the sqrt list
  step.target = kCuda;
  step.params = {{0, 1000, 0}, {1, 3000, 1}, {2, 500, 0}};
  TemporaryPeak grouped;
  lower_optimizer_step(step, grouped);
  EXPECT_EQ(grouped.peak(), 3000);
  for (StepParam& p : step.params) p.group = 0;
  TemporaryPeak one;
  lower_optimizer_step(step, one);
  EXPECT_EQ(one.peak(), 4500);
}

TEST(Graph, ModuleBlocksGroupUnderTheOutermostBranchingModule) {
  ModelRequest r;
  r.name = "act";
  const Result<Graph> g = build_model(r);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const std::vector<ModuleId> blocks = module_blocks(*g);
  std::map<std::string, std::string> block_of;
  for (size_t m = 0; m < g->modules.size(); ++m) {
    block_of[g->modules[m].path] = g->modules[blocks[m]].path;
  }
  EXPECT_EQ(block_of["model.encoder.layers.0.self_attn"], "model.encoder");
  EXPECT_EQ(block_of["model.backbone.layer4.1.conv2"], "model.backbone");
  EXPECT_EQ(block_of["model.action_head"], "model.action_head");
  EXPECT_EQ(block_of["model"], "model");  // the block root is its own block
  EXPECT_EQ(block_of[""], "model");
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

// Records the optimizer state a step creates.
class StateBytes : public EventSink {
 public:
  int32_t alloc(int64_t bytes, Category category, bool, int32_t) override {
    if (category == Category::kOptimizerState) state_ += bytes;
    if (category == Category::kTemporary) ++temporaries_;
    return count_++;
  }
  int32_t alloc_paged(int64_t bytes, int32_t) override {
    paged_ += bytes;
    return count_++;
  }
  void release(int32_t) override {}
  int64_t state() const { return state_; }
  int64_t paged() const { return paged_; }
  int temporaries() const { return temporaries_; }

 private:
  int64_t state_ = 0;
  int64_t paged_ = 0;
  int temporaries_ = 0;
  int32_t count_ = 0;
};

// bitsandbytes' Adam8bit: uint8 moments and a float32 absmax per 2048-element block for a
// parameter of 4096 elements or more, float32 moments below; two shared 256-entry maps.
TEST(Lowering, EightBitAdamStateAsBitsandbytesKeepsIt) {
  OptimizerStep step;
  step.optimizer.kind = OptimizerKind::kAdamW8bit;
  step.target = {Device::kCuda, TorchVersion::k2};
  step.first_step = true;
  constexpr int64_t kF32 = 4;  // bytes of a float32
  step.params = {{0, kF32 * 10000, 0, 10000}, {1, kF32 * 100, 0, 100}, {2, kF32 * 4096, 1, 4096}};
  StateBytes first;
  lower_optimizer_step(step, first);
  const int64_t big = int64_t{2} * 10000 + 2 * kF32 * 5;  // 10000 elements: 5 blocks
  const int64_t small = 2 * kF32 * 100;                   // below min_8bit_size: float32
  const int64_t edge = int64_t{2} * 4096 + 2 * kF32 * 2;  // exactly 4096: 8-bit, 2 blocks
  const int64_t maps = kF32 * 2 * 256;
  EXPECT_EQ(first.state(), big + small + edge + maps);
  EXPECT_EQ(first.temporaries(), 0);  // one fused kernel per parameter
  step.first_step = false;
  StateBytes later;
  lower_optimizer_step(step, later);
  EXPECT_EQ(later.state(), 0);
}

// bitsandbytes' paged optimizers (get_state_buffer): the two states of a parameter with 1e5
// elements or more go to unified memory; smaller parameters' states, the absmax vectors and the
// maps are ordinary tensors. PagedAdamW keeps fp32 states whatever the parameter's dtype.
TEST(Lowering, PagedOptimizersPageTheStatesOfLargeParameters) {
  OptimizerStep step;
  step.target = {Device::kCuda, TorchVersion::k2};
  step.first_step = true;
  constexpr int64_t kF32 = 4;
  constexpr int64_t kBf16 = 2;
  // 200,000 elements (98 blocks of 2048), exactly 100,000 (49 blocks), 99,999 and 100.
  step.params = {{0, kBf16 * 200'000, 0, 200'000},
                 {1, kBf16 * 100'000, 0, 100'000},
                 {2, kBf16 * 99'999, 0, 99'999},
                 {3, kBf16 * 100, 0, 100}};
  step.optimizer.kind = OptimizerKind::kPagedAdamW8bit;
  StateBytes eight;
  lower_optimizer_step(step, eight);
  EXPECT_EQ(eight.paged(), int64_t{2} * (200'000 + 100'000));
  EXPECT_EQ(eight.state(), 2 * kF32 * (98 + 49) + (int64_t{2} * 99'999 + 2 * kF32 * 49) +
                               2 * kF32 * 100 + kF32 * 2 * 256);
  step.optimizer.kind = OptimizerKind::kPagedAdamW;
  StateBytes full;
  lower_optimizer_step(step, full);
  EXPECT_EQ(full.paged(), 2 * kF32 * (200'000 + 100'000));
  EXPECT_EQ(full.state(), 2 * kF32 * (99'999 + 100));
  EXPECT_EQ(full.temporaries(), 0);
}

}  // namespace
}  // namespace trainfit
