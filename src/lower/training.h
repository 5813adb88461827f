// A training step as a list of allocation events: the seam between lowering (which knows
// PyTorch's semantics) and the allocator model (which knows the CUDA caching allocator).
//
//   TrainingConfig cfg;
//   cfg.optimizer.kind = OptimizerKind::kAdamW;
//   Result<EventList> events = lower_training_step(graph, cfg, LoweringOptions{});
//   for (const Event& e : events->events) { ... e.alloc, e.buffer, e.bytes ... }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace trainfit {

// kAdam8bit / kAdamW8bit: bitsandbytes' Adam8bit / AdamW8bit (blockwise 8-bit state).
enum class OptimizerKind : uint8_t { kSgd, kMomentum, kAdam, kAdamW, kAdam8bit, kAdamW8bit };
// kDefault: what PyTorch picks: foreach for CUDA tensors on 2.x, the for-loop otherwise.
enum class OptimizerImpl : uint8_t { kDefault, kForeach, kFused, kLoop };

std::string_view optimizer_name(OptimizerKind kind);
std::string_view optimizer_impl_name(OptimizerImpl impl);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  OptimizerImpl impl = OptimizerImpl::kDefault;
  // Negative: the torch default (0 for SGD and Adam, 0.01 for AdamW).
  double weight_decay = -1;
  std::string preset;  // the model's own recipe this follows ("LeRobot's ACT preset: ..."), if any
};

struct TrainingConfig {
  OptimizerConfig optimizer;
  int grad_accum = 1;  // micro-batches per optimizer step
  int iterations = 2;  // optimizer steps simulated (state appears at the first)
  // Module-path patterns run under non-reentrant activation checkpointing; `*` matches one
  // path component ("encoder.layers.*" checkpoints each layer).
  std::vector<std::string> checkpoint;
};

// What the device adds beyond the graph's ops.
struct LoweringOptions {
  int64_t cublas_workspace_bytes = 0;  // per cuBLAS handle, allocated at its first GEMM
  bool op_workspaces = false;          // transient memory inside kernels (CUDA)
};

enum class Category : uint8_t {
  kParameter,       // parameters and buffers
  kGradient,        // parameters' .grad
  kOptimizerState,  // exp_avg, momentum buffers, step counters
  kActivation,      // tensors autograd keeps for backward
  kTemporary,       // everything else an op makes: outputs in flight, gradients in flight
  kInput,           // the batch
  kWorkspace,       // cuBLAS workspaces and in-kernel scratch
};
inline constexpr int kCategoryCount = 7;
std::string_view category_name(Category c);

enum class Phase : uint8_t { kSetup, kForward, kBackward, kOptimizer };
std::string_view phase_name(Phase p);

struct Buffer {
  int64_t bytes = 0;
  Category category = Category::kTemporary;
  NodeId node = kNone;      // the op that allocated it, if any
  ModuleId module = kNone;  // the module it belongs to, if any
  bool host = false;        // host memory: not on the GPU
  int32_t param = -1;       // the parameter it holds (category parameter), as an index
};

struct Event {
  int32_t buffer = 0;
  bool alloc = true;
  Phase phase = Phase::kSetup;
  uint8_t iteration = 0;
  NodeId node = kNone;  // the op during which it happens
};

struct EventList {
  std::vector<Buffer> buffers;
  std::vector<Event> events;

  // Appends a buffer and the event that allocates it; returns the buffer's index.
  int32_t add_alloc(const Buffer& buffer, Phase phase, uint8_t iteration, NodeId node) {
    buffers.push_back(buffer);
    const auto id = static_cast<int32_t>(buffers.size() - 1);
    events.push_back({id, true, phase, iteration, node});
    return id;
  }
};

// Does a module path match a pattern where `*` stands for one path component?
bool module_matches(std::string_view path, std::string_view pattern);

}  // namespace trainfit
