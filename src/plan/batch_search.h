// The largest batch that fits a GPU, found by running the estimator: every answer is an
// estimate at that batch, none is extrapolated.
//
// Note [The edge]: the answer is the largest batch that fits, whichever batches below it do
// not. Reserved memory is not monotone in the batch (where the allocator's segments land
// changes with every size), so batch B can fit where B - 1 does not; live tensors are monotone,
// so every batch whose peak allocated memory plus the CUDA context is over the budget fails,
// and the search walks down from the first of those to the first batch that fits. So
// `estimate --margin` at the answer fits and at every batch above it does not, whichever
// command found it.
//
//   PipelineEstimator estimator;
//   BatchSearch search(estimator, request);                      // the model and its training
//   Result<BatchFit> f = search.fit(cuda_profile(*find_gpu("rtx4090")), 0.05);
//   f->max_batch                                                 // fits; max_batch + 1 does not
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "pipeline/estimator.h"

namespace trainfit {

// Batches above this are not searched; a model that fits it is reported as fitting "at least".
inline constexpr int64_t kMaxSearchBatch = int64_t{1} << 16;
// Micro-batches per step a plan goes up to (trainfit launch, fit --target-batch): beyond this a
// plan is not a plan.
inline constexpr int kMaxPlannedAccumulation = 256;
// The default share of the GPU's memory `fit` keeps free: room for what two simulated
// iterations do not show (fragmentation over a long run, other processes, varying inputs).
inline constexpr double kDefaultMargin = 0.05;

// One batch size's figures with no memory limit: a point of memory against batch size.
struct BatchPoint {
  int64_t batch = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t device_used_bytes = 0;
};

struct BatchFit {
  // Decided by the upper figures (Note [Workspace bounds]): the largest batch whose device use,
  // with every workspace no recording measured at its bound, fits.
  int64_t max_batch = 0;  // 0: not even batch 1 fits
  // What the central figures alone would allow; equal to max_batch where every workspace was
  // measured.
  int64_t central_max_batch = 0;
  bool at_search_limit = false;  // every batch up to kMaxSearchBatch fits
  int64_t budget_bytes = 0;      // the GPU's memory less the margin
  // At max_batch, on this GPU.
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t device_used_bytes = 0;
  int64_t device_used_upper_bytes = 0;
  int64_t alloc_retries = 0;  // > 0: it fits only by freeing the allocator's cache mid-step
  // What max_batch + 1 would show on this GPU without the margin (the upper figure); -1: it
  // does not fit the whole GPU either.
  int64_t next_device_used_bytes = 0;
  // What it shows on a GPU with unlimited memory (the upper figure): what a larger card shows.
  int64_t next_unlimited_bytes = 0;
};

// Searches the batch of one model and training configuration across devices. Estimates on an
// unbounded device are shared by every GPU with the same architecture, SM count, cuBLAS
// workspace and CUDA context;
// each search steers by its own probes, so a GPU's answer is the same searched alone.
class BatchSearch {
 public:
  // What sets a device's figures besides its memory: its architecture and SMs (which workspaces
  // were measured, how reductions stage), its cuBLAS workspace and CUDA context. Devices of one
  // class share a search's probes on an unbounded device.
  using DeviceClass = std::tuple<int, int, int64_t, int64_t>;
  static DeviceClass device_class(const DeviceProfile& device) {
    return {device.target.sm, device.target.sm_count, device.cublas_workspace_bytes,
            device.context_bytes};
  }

  // `request`'s device, margin and batch are the search's to set.
  BatchSearch(Estimator& estimator, TrainingRequest request)
      : estimator_(estimator), base_(std::move(request)) {}
  // The largest batch whose device use stays within the device's memory less `margin` of it.
  Result<BatchFit> fit(const DeviceProfile& device, double margin);
  int estimates() const { return estimates_; }
  // Memory at each batch on `device` without its limit (the estimates the search made are
  // reused): batches from 1 to past the largest that fits, that batch and the next one.
  Result<std::vector<BatchPoint>> curve(const DeviceProfile& device, const BatchFit& fit);

 private:
  struct Probe {
    int64_t allocated = 0;
    int64_t allocated_upper = 0;
    int64_t reserved = 0;
    int64_t device_used = 0;
    int64_t device_used_upper = 0;
    int64_t retries = 0;
    bool fits = true;
    bool fits_upper = true;
    int64_t batch = 0;  // where the walk down found it
    int64_t used(bool upper) const { return upper ? device_used_upper : device_used; }
  };
  // `device` with its memory, or with total_bytes -1 for an unbounded one (no margin); one
  // estimate more. probe_on: the same on a given estimator, counting nothing.
  Result<Probe> run(const DeviceProfile& device, double margin, int64_t batch);
  Result<Probe> probe_on(Estimator& estimator, const DeviceProfile& device, double margin,
                         int64_t batch) const;
  Result<Probe> unbounded(const DeviceProfile& device, int64_t batch);
  // Probes of `device` with its memory less the margin (does the batch fit, and with what
  // figures), by its class, the budget and the batch.
  using BoundedKey = std::tuple<DeviceClass, int64_t, int64_t>;
  static BoundedKey bounded_key(const DeviceProfile& device, double margin, int64_t batch);
  // From `from` down, the first batch that fits (the upper figures or the central ones), or
  // none down to batch 1.
  Result<std::optional<Probe>> walk_down(const DeviceProfile& device, double margin, int64_t from,
                                         bool upper);
  // The smallest batch whose peak allocated memory (the upper figure's or the central one's)
  // plus the CUDA context is over `budget` (kMaxSearchBatch + 1 if none is): it and every
  // larger batch do not fit.
  Result<int64_t> first_over_budget(const DeviceProfile& device, int64_t budget, bool upper);
  // BatchFit::next_device_used_bytes and next_unlimited_bytes for `batch`.
  Status next_needs(const DeviceProfile& device, int64_t batch, BatchFit& fit);

  Estimator& estimator_;
  TrainingRequest base_;
  // Probes by device class and batch; bounded ones also by the budget.
  std::map<std::pair<DeviceClass, int64_t>, Probe> unbounded_;
  std::map<BoundedKey, Probe> bounded_;
  int estimates_ = 0;
};

}  // namespace trainfit
