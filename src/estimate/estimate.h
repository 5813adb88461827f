// The estimate: a model graph trained on a device, from lowering to allocator statistics.
//
//   EstimateOptions o;
//   o.device = cuda_profile(*find_gpu("rtx4090"));
//   o.training.optimizer.kind = OptimizerKind::kAdamW;
//   Result<Estimate> e = estimate(graph, o);
//   e->peak_allocated_bytes, e->peak_reserved_bytes, e->device_used_bytes, e->fits ...
//
// The cuda profile runs the events through the caching-allocator model; the cpu profile counts
// exact tensor bytes (reserved = allocated), as the PyTorch CPU measurements do.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "estimate/device.h"
#include "estimate/step_time.h"
#include "lower/cost.h"
#include "lower/events.h"
#include "lower/lowering.h"
#include "lower/training.h"

namespace trainfit {

struct EstimateOptions {
  TrainingConfig training;
  DeviceProfile device = cuda_profile(std::nullopt);
  AllocatorConfig allocator;
  int64_t margin_bytes = 0;  // of the device's memory, kept free: a run fits in total - margin
  bool timeline = false;
  bool explain = false;  // list the tensors alive at the peak
  // On out of memory, replay again without the margin or on an unbounded device for the peak
  // figures (Note [Past an OOM]); a search that only asks whether it fits turns this off.
  bool peak_after_oom = true;
  bool step_time = true;                // with the device's timing constants: Estimate::time
  CostOptions cost;                     // how the kernels run: TF32, memory format (the step time)
  std::optional<int64_t> dataset_size;  // samples in an epoch: the epoch time
};

// One tensor (or workspace) alive at the peak.
struct LiveTensor {
  int64_t bytes = 0;  // as the allocator counts it
  Category category = Category::kTemporary;
  std::string op;               // the op that made it, if any
  std::string module;           // its module path
  Phase phase = Phase::kSetup;  // when it was allocated
};

struct TimelinePoint {
  Phase phase = Phase::kSetup;
  uint8_t iteration = 0;
  NodeId node = kNone;
  bool alloc = true;         // the event: an allocation, or a free
  bool empty_cache = false;  // or torch.cuda.empty_cache()
  Category category = Category::kTemporary;
  int64_t bytes = 0;  // what the event asked for or gave back, before the allocator rounds
  int64_t allocated = 0;
  int64_t reserved = 0;
};

struct ModuleBytes {
  std::string module;
  int64_t bytes = 0;
};

struct Moment {
  Phase phase = Phase::kSetup;
  int iteration = 0;
  std::string op;      // "conv2d" or "" outside ops (optimizer, setup)
  std::string module;  // module path of that op
};

// Note [Past an OOM]: a run that runs out of memory stops there, so its peak figures are those
// of another replay of it, one that does not fail: on the same GPU without the margin if it fits
// there, else on a GPU with unlimited memory (what a larger card would show). Never those of a
// replay that went on past its failure.
enum class FiguresFrom : uint8_t {
  kTheRun,     // the run fits: its own figures
  kWholeGpu,   // it fails only for the margin: the same GPU with all its memory
  kUnlimited,  // it fails on the whole GPU too: a GPU with unlimited memory
};

struct Estimate {
  int64_t parameters = 0;
  int64_t trainable_parameters = 0;
  int64_t activation_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t cuda_context_bytes = 0;
  int64_t device_used_bytes = 0;  // peak reserved + CUDA context
  Moment peak;                    // where allocated memory peaks (the first time)
  // Bytes per category at the allocated peak (block sizes, so they add up to it).
  std::array<int64_t, kCategoryCount> breakdown{};
  std::vector<ModuleBytes> activations_by_module;  // activation bytes at the peak, per top module
  int64_t allocator_cache_bytes = 0;               // peak reserved - peak allocated
  // bitsandbytes' paged optimizer state: unified memory outside the allocator and the figures
  // above, on the GPU while it has room and moved to the host when it has not.
  int64_t paged_bytes = 0;
  int64_t num_alloc_retries = 0;
  int64_t total_bytes = -1;  // the device's memory, when known
  int64_t margin_bytes = 0;  // of it, kept free
  bool fits = true;
  int64_t headroom_bytes = 0;  // total - margin - device used
  std::optional<Moment> oom;   // where the run would run out of memory
  OutOfMemory oom_numbers;     // what it asked for there
  FiguresFrom figures_from = FiguresFrom::kTheRun;
  size_t events = 0;
  std::vector<TimelinePoint> timeline;
  // cuDNN's benchmark mode: problems searched, and those whose trial was never measured.
  int plan_searches = 0;
  int unmeasured_searches = 0;
  // Note [Workspace bounds] (graph/device_rules.h): the figures with every workspace no
  // recording measured at its bound; the central figures where everything was measured.
  int64_t peak_allocated_upper_bytes = 0;
  int64_t peak_reserved_upper_bytes = 0;
  int64_t device_used_upper_bytes = 0;
  bool fits_upper = true;
  // Kernel calls of one step by where their workspace's size comes from (FigureSource), and
  // the bytes of those workspaces alive at the allocated peak (block sizes).
  std::array<int64_t, kFigureSourceCount> workspace_calls{};
  std::array<int64_t, kFigureSourceCount> workspace_bytes_at_peak{};
  int64_t unmeasured_workspace_calls() const {
    return workspace_calls[static_cast<size_t>(FigureSource::kScaled)] +
           workspace_calls[static_cast<size_t>(FigureSource::kRule)];
  }
  std::vector<LiveTensor> live_at_peak;  // with EstimateOptions::explain, largest first
  // One optimizer step on the GPU: with a GPU's timing constants and a model graph (a trace
  // has no shapes to cost).
  std::optional<StepTime> time;
  std::optional<EpochTime> epoch;  // with a dataset size
  std::optional<DdpLayout> ddp;    // with --strategy ddp: one rank's gradient buckets
  std::vector<FsdpUnitSize> fsdp;  // with --strategy fsdp: its units, the root first
};

Result<Estimate> estimate(const Graph& graph, const EstimateOptions& options);

// estimate() in two halves, for a search that replays one step under many memory limits: the
// lowering, which reads only the graph, options.training and lowering_options(options.device),
// and the allocator replay with the report's figures.
struct LoweredStep {
  EventList list;
  Estimate facts;  // parameter counts and activation bytes
};
LoweringOptions lowering_options(const DeviceProfile& device);
Result<LoweredStep> lower_step(const Graph& graph, const EstimateOptions& options);
// `step` must be lower_step(graph, o) for options `o` that differ from `options` at most in
// what lowering_options does not read (memory, margin, context, what to report).
Result<Estimate> estimate_lowered(const Graph& graph, const LoweredStep& step,
                                  const EstimateOptions& options);

// The step time of a graph on the options' device: nullopt without timing constants (no GPU
// named) or on the cpu profile. On more than one GPU it includes the communication, from the
// layout the lowering made (DDP's buckets, FSDP's units: `lowered`, lowered here when not given).
Result<std::optional<StepTime>> graph_step_time(const Graph& graph, const EstimateOptions& options,
                                                const EventList* lowered = nullptr);

// What the nodes, modules and parameters an event list refers to are called, for reports.
struct EventNames {
  std::function<std::string(NodeId)> op;
  std::function<ModuleId(NodeId)> node_module;
  std::function<std::string(ModuleId)> module;  // its path
  std::function<std::string(int32_t)> param;    // a parameter's name
  std::vector<ModuleId> blocks;  // per module: the block its activations are reported under
};

EventNames names_of(const Graph& graph);  // refers to `graph`, which must outlive it

// The allocator model and the report's figures for events from any source (lowering or a
// recorded trace). `facts` brings what the events do not say: parameter counts and
// activation_bytes.
// `at_bound`: every workspace no recording measured at its bound (Buffer::bound_bytes).
Result<Estimate> estimate_events(const EventList& list, const EventNames& names, Estimate facts,
                                 const EstimateOptions& options, bool at_bound = false);

// Whether the events' workspaces include some no recording measured, so that the estimate has
// a bound above its central figures (Note [Workspace bounds]).
bool has_unmeasured_workspaces(const EventList& list);
// Sets `e`'s upper figures, `list`'s events replayed with every unmeasured workspace at its
// bound; the central ones where there is none.
Status add_workspace_bound(Estimate& e, const EventList& list, const EventNames& names,
                           const EstimateOptions& options);

}  // namespace trainfit
