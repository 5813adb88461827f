// The event list: one training step as the allocations and frees it makes, in order. It is the
// seam of the pipeline: lowering (lowering.h) writes it from a zoo graph, the trace replay
// (sources/trace/trace_model.h) writes it from a recorded PyTorch run, and everything after it
// (the allocator model, the report's figures) reads it without knowing which.
//
//   EventList list;
//   const int32_t b = list.add_alloc({.bytes = 4096, .category = Category::kActivation},
//                                    Phase::kForward, 0, node);
//   list.events.push_back({b, /*alloc=*/false, Phase::kBackward, 0, node});
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "graph/graph.h"
#include "lower/ddp.h"

namespace trainfit {

enum class Category : uint8_t {
  kParameter,       // parameters and buffers
  kGradient,        // parameters' .grad
  kOptimizerState,  // exp_avg, momentum buffers, step counters
  kActivation,      // tensors autograd keeps for backward
  kTemporary,       // everything else an op makes: outputs in flight, gradients in flight
  kInput,           // the batch
  kWorkspace,       // cuBLAS workspaces and in-kernel scratch
  kCommunication,   // DDP's gradient buckets and the flat copies collectives send
};
inline constexpr int kCategoryCount = 8;
inline constexpr auto kCategoryNames = enum_names<Category>({
    {Category::kParameter, "parameter"},
    {Category::kGradient, "gradient"},
    {Category::kOptimizerState, "optimizer_state"},
    {Category::kActivation, "activation"},
    {Category::kTemporary, "temporary"},
    {Category::kInput, "input"},
    {Category::kWorkspace, "workspace"},
    {Category::kCommunication, "communication"},
});
inline std::string_view category_name(Category c) {
  return kCategoryNames.name(c);
}

enum class Phase : uint8_t { kSetup, kForward, kBackward, kOptimizer };
inline constexpr auto kPhaseNames = enum_names<Phase>({
    {Phase::kSetup, "setup"},
    {Phase::kForward, "forward"},
    {Phase::kBackward, "backward"},
    {Phase::kOptimizer, "optimizer"},
});
inline std::string_view phase_name(Phase p) {
  return kPhaseNames.name(p);
}

// A buffer's index in its EventList.
using BufferId = int32_t;

struct Buffer {
  int64_t bytes = 0;
  Category category = Category::kTemporary;
  NodeId node = kNone;      // the op that allocated it, if any
  ModuleId module = kNone;  // the module it belongs to, if any
  bool host = false;        // host memory: not on the GPU
  // bitsandbytes' paged optimizer state: CUDA unified memory, outside PyTorch's allocator (host
  // is set too), on the GPU while it has room and moved to the host when it has not.
  bool paged = false;
  int32_t param = -1;  // the parameter it holds (category parameter), as an index
  // Where its size comes from: a workspace no recording measured is a central figure with a
  // bound (device_rules.h, Note [Workspace bounds]).
  FigureSource source = FigureSource::kDerived;
  // Its size at the upper bound where the source is not measured; -1: `bytes` either way. A
  // buffer whose bytes are 0 is made at the bound's replay only.
  int64_t bound_bytes = -1;
};

struct Event {
  BufferId buffer = 0;
  bool alloc = true;
  Phase phase = Phase::kSetup;
  uint8_t iteration = 0;
  NodeId node = kNone;  // the op during which it happens
  // torch.cuda.empty_cache() here (cuDNN's benchmark mode calls it): no buffer, `alloc` false.
  bool empty_cache = false;
};

// One FullyShardedDataParallel unit as rank 0 holds it.
struct FsdpUnitSize {
  ModuleId module = kNone;   // the wrapped module; kNone for the root
  std::string path;          // its module path ("" for the root)
  int64_t flat_bytes = 0;    // its parameters flattened
  int64_t padded_bytes = 0;  // gathered: padded to a multiple of the world size
  int64_t shard_bytes = 0;   // one rank's shard
};

struct EventList {
  IdVector<Buffer> buffers;
  std::vector<Event> events;
  std::optional<DdpLayout> ddp;    // with --strategy ddp: the buckets behind the events
  std::vector<FsdpUnitSize> fsdp;  // with --strategy fsdp: its units, the root first
  // cuDNN's benchmark mode: the problems whose plans the first iteration searched, and of
  // them those whose trial workspace no recording measured (device_rules.h).
  int plan_searches = 0;
  int unmeasured_searches = 0;
  // Kernel calls in one step whose workspace is not derived, by FigureSource: a cuDNN
  // convolution's measured, scaled or rule workspace (those asking none included).
  std::array<int64_t, kFigureSourceCount> workspace_sources{};

  // Appends a buffer and the event that allocates it; returns the buffer's index.
  BufferId add_alloc(const Buffer& buffer, Phase phase, uint8_t iteration, NodeId node) {
    const BufferId id = buffers.next_id();
    buffers.push_back(buffer);
    events.push_back({id, true, phase, iteration, node});
    return id;
  }
};

// Where a lowering step (the optimizer's) records its buffers, whatever list they go to.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // A new buffer; `param` >= 0 labels optimizer state with its parameter.
  virtual BufferId alloc(int64_t bytes, Category category, bool host, int32_t param) = 0;
  // Optimizer state in unified memory (Buffer::paged). Sinks that do not tell it apart count it
  // as device memory.
  virtual BufferId alloc_paged(int64_t bytes, int32_t param) {
    return alloc(bytes, Category::kOptimizerState, false, param);
  }
  virtual void release(BufferId buffer) = 0;
};

}  // namespace trainfit
