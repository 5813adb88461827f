// The planner: the largest batch that fits a GPU, what each memory knob saves and costs, and
// the cheapest combination of knobs that makes a target batch fit. Every answer comes from
// running the estimate pipeline many times; none is extrapolated.
//
//   Result<BatchSearch> s = BatchSearch::create(flags);         // flags: model + training
//   Result<BatchFit> f = s->fit(device);                        // device: a GPU and a margin
//   f->max_batch                                                // fits; max_batch + 1 does not
//
//   Result<std::vector<Knob>> knobs = memory_knobs(flags, device);
//   Result<EstimateFlags> variant = apply_knob(flags, knobs->front());
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli/pipeline.h"

namespace trainfit {

// Batches above this are not searched; a model that fits it is reported as fitting "at least".
inline constexpr int64_t kMaxSearchBatch = int64_t{1} << 16;
// The default share of the GPU's memory `fit` keeps free: room for what two simulated
// iterations do not show (fragmentation over a long run, other processes, varying inputs).
inline constexpr double kDefaultMargin = 0.05;

struct BatchFit {
  int64_t max_batch = 0;         // 0: not even batch 1 fits
  bool at_search_limit = false;  // every batch up to kMaxSearchBatch fits
  int64_t budget_bytes = 0;      // the GPU's memory less the margin
  // At max_batch, on this GPU.
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t device_used_bytes = 0;
  int64_t alloc_retries = 0;  // > 0: it fits only by freeing the allocator's cache mid-step
  // At max_batch + 1 on an unbounded device: what would not fit.
  int64_t next_device_used_bytes = 0;
};

// Searches the batch for one model and training configuration across devices. Estimates on an
// unbounded device are shared by every GPU with the same cuBLAS workspace and CUDA context.
class BatchSearch {
 public:
  static Result<BatchSearch> create(const EstimateFlags& flags);
  // The largest batch whose device use stays within device.total_bytes - device.margin_bytes.
  Result<BatchFit> fit(const DeviceProfile& device);
  int estimates() const { return estimates_; }

 private:
  struct Probe {
    int64_t allocated = 0;
    int64_t reserved = 0;
    int64_t device_used = 0;
    int64_t retries = 0;
    bool fits = true;
  };
  Result<Probe> run(const DeviceProfile& device, int64_t batch);
  Result<Probe> unbounded(const DeviceProfile& device, int64_t batch);
  // Does `batch` fit `device`? The unbounded estimate decides unless the batch is so close to
  // the limit that the allocator would free its cache and retry; then the bounded one does.
  Result<bool> fits(const DeviceProfile& device, int64_t batch);

  ResolvedEstimate base_;
  // The graph last built: a probe near the limit estimates the same batch twice.
  std::optional<Graph> graph_;
  int64_t graph_batch_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Probe> unbounded_;  // workspace, context, batch
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, Probe> bounded_;  // + budget
  int estimates_ = 0;
};

// How intrusive a knob is; --target-batch prefers the least intrusive combination.
enum class KnobKind : uint8_t {
  kFree,       // same math, same speed or faster (allocator setting, fused optimizer)
  kPrecision,  // same model in lower precision (AMP, 8-bit optimizer state)
  kRecompute,  // same math, more compute (activation checkpointing)
  kRecipe,     // a different training recipe (SGD instead of Adam, a frozen backbone)
  kModel,      // a different model (architecture or input size): only when allowed
};
std::string_view knob_kind_name(KnobKind kind);

struct Knob {
  std::string name;  // "checkpoint encoder layers"
  KnobKind kind = KnobKind::kFree;
  std::string group;              // knobs of one non-empty group exclude each other
  std::vector<std::string> args;  // what it adds to the command line
  double recompute = 0;           // checkpointing: recomputed share of the step's FLOPs
  std::string cost;               // "none", "+9.1% FLOPs" (of the step), "changes the model"
};

// The memory knobs that apply to a configuration on a device (bf16 needs sm80 or later).
Result<std::vector<Knob>> memory_knobs(const EstimateFlags& flags, const DeviceProfile& device);
// The configuration with one or more knobs turned on.
Result<EstimateFlags> apply_knobs(const EstimateFlags& flags, const std::vector<const Knob*>& on);

// One knob turned on: its estimate at the user's batch on the device, and its largest batch.
struct WhatIfRow {
  Knob knob;
  EstimateFlags flags;  // the configuration it estimates (estimate_args reproduces it)
  Estimate estimate;
  BatchFit fit;
};

struct WhatIf {
  std::vector<WhatIfRow> rows;  // largest max batch first, then smallest device use
  std::vector<std::pair<std::string, std::string>> skipped;  // knob, why it does not apply
  int estimates = 0;
};

// `flags` carries the GPU and margin; rows whose configuration the model rejects are skipped.
Result<WhatIf> what_if(const EstimateFlags& flags, const std::vector<Knob>& knobs);

// --target-batch: the least intrusive combination of knobs under which the batch fits, or the
// gradient accumulation that reaches it with the largest micro-batch that fits.
struct TargetPlan {
  int64_t target = 0;
  bool fits = false;            // as given, or with `knobs`
  std::vector<Knob> knobs;      // the combination (empty: fits as given)
  EstimateFlags flags;          // the configuration that fits, or the accumulation plan's
  Estimate estimate;            // of `flags`
  int64_t micro_batch = 0;      // accumulation plan (fits is false): micro-batch ...
  int64_t accumulation = 0;     // ... times steps ...
  int64_t effective_batch = 0;  // ... = this, N or the nearest above it
  int combinations_tried = 0;
};

Result<TargetPlan> plan_target(const EstimateFlags& flags, const std::vector<Knob>& knobs,
                               int64_t target, bool allow_model_changes);

}  // namespace trainfit
