// The largest batch that fits a GPU, found by running the estimator: every answer is an
// estimate at that batch, none is extrapolated.
//
//   PipelineEstimator estimator;
//   BatchSearch search(estimator, request);                      // the model and its training
//   Result<BatchFit> f = search.fit(cuda_profile(*find_gpu("rtx4090")), 0.05);
//   f->max_batch                                                 // fits; max_batch + 1 does not
#pragma once

#include <cstdint>
#include <map>
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
  // At max_batch + 1 on an unbounded device: what would not fit (the upper figure).
  int64_t next_device_used_bytes = 0;
};

// Searches the batch of one model and training configuration across devices. Estimates on an
// unbounded device are shared by every GPU with the same architecture, SM count, cuBLAS
// workspace and CUDA context;
// each search steers by its own probes, so a GPU's answer is the same searched alone.
class BatchSearch {
 public:
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
    int64_t reserved = 0;
    int64_t device_used = 0;
    int64_t device_used_upper = 0;
    int64_t retries = 0;
    bool fits = true;
    bool fits_upper = true;
    int64_t used(bool upper) const { return upper ? device_used_upper : device_used; }
  };
  // The search by the upper figures or the central ones.
  Result<BatchFit> search(const DeviceProfile& device, double margin, bool upper);
  // `device` with its memory, or with total_bytes -1 for an unbounded one (no margin).
  Result<Probe> run(const DeviceProfile& device, double margin, int64_t batch);
  Result<Probe> unbounded(const DeviceProfile& device, int64_t batch);
  // Does `batch` fit `device`? The unbounded estimate decides unless the batch is so close to
  // the limit that the allocator would free its cache and retry; then the bounded one does.
  Result<bool> fits(const DeviceProfile& device, double margin, int64_t batch, bool upper);

  Estimator& estimator_;
  TrainingRequest base_;
  // Probes by what sets a device's figures: its architecture and SMs (which workspaces were
  // measured, how reductions stage), cuBLAS workspace, context and the batch; bounded: + budget.
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t>, Probe> unbounded_;
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t, int64_t>, Probe> bounded_;
  int estimates_ = 0;
  bool bounded_by_workspaces_ = false;  // some probe's upper figure is above its central one
};

}  // namespace trainfit
