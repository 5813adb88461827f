#include "plan/batch_search.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace trainfit {

Result<BatchSearch::Probe> BatchSearch::run(const DeviceProfile& device, double margin,
                                            int64_t batch) {
  TrainingRequest r = base_;
  r.batch = batch;
  r.device = device;
  r.margin.reset();
  if (device.total_bytes >= 0) r.margin = margin;
  ++estimates_;
  // A probe that runs out only needs to say so, and none needs the step time.
  TF_ASSIGN_OR_RETURN(const Estimate e,
                      estimator_.estimate(r, {.peak_after_oom = false, .step_time = false}));
  // The upper figures are never below the central ones.
  const int64_t used_upper = std::max(e.device_used_upper_bytes, e.device_used_bytes);
  const bool fits_upper = e.fits && e.fits_upper;
  if (used_upper != e.device_used_bytes || fits_upper != e.fits) bounded_by_workspaces_ = true;
  return Probe{e.peak_allocated_bytes,
               e.peak_reserved_bytes,
               e.device_used_bytes,
               used_upper,
               e.num_alloc_retries,
               e.fits,
               fits_upper};
}

Result<BatchSearch::Probe> BatchSearch::unbounded(const DeviceProfile& device, int64_t batch) {
  const auto key = std::make_tuple(device.target.sm, device.target.sm_count,
                                   device.cublas_workspace_bytes, device.context_bytes, batch);
  if (auto it = unbounded_.find(key); it != unbounded_.end()) return it->second;
  DeviceProfile open = device;
  open.total_bytes = -1;
  TF_ASSIGN_OR_RETURN(const Probe p, run(open, 0, batch));
  unbounded_.emplace(key, p);
  return p;
}

Result<std::vector<BatchPoint>> BatchSearch::curve(const DeviceProfile& device,
                                                   const BatchFit& fit) {
  constexpr int64_t kSteps = 12;  // evenly spaced batches, besides 1, the largest and the next
  const int64_t top = std::min(kMaxSearchBatch, std::max<int64_t>(4, (fit.max_batch + 1) * 5 / 4));
  std::vector<int64_t> batches = {1, fit.max_batch, fit.max_batch + 1};
  for (int64_t k = 1; k <= kSteps; ++k) batches.push_back(std::max<int64_t>(1, top * k / kSteps));
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::vector<BatchPoint> points;
  for (int64_t b : batches) {
    if (b < 1 || b > kMaxSearchBatch) continue;
    TF_ASSIGN_OR_RETURN(const Probe p, unbounded(device, b));
    points.push_back({b, p.allocated, p.reserved, p.device_used});
  }
  return points;
}

Result<bool> BatchSearch::fits(const DeviceProfile& device, double margin, int64_t batch,
                               bool upper) {
  const int64_t budget = device.total_bytes - margin_bytes(device.total_bytes, margin);
  TF_ASSIGN_OR_RETURN(const Probe open, unbounded(device, batch));
  // The allocator never reaches the limit: the bounded run would be the same.
  if (open.used(upper) <= budget) return true;
  // Live tensors alone exceed it: no freeing of cached blocks helps.
  if (open.allocated + device.context_bytes > budget) return false;
  const auto key =
      std::make_tuple(device.target.sm, device.target.sm_count, device.cublas_workspace_bytes,
                      device.context_bytes, budget, batch);
  auto it = bounded_.find(key);
  if (it == bounded_.end()) {
    TF_ASSIGN_OR_RETURN(const Probe p, run(device, margin, batch));
    it = bounded_.emplace(key, p).first;
  }
  return upper ? it->second.fits_upper : it->second.fits;
}

Result<BatchFit> BatchSearch::fit(const DeviceProfile& device, double margin) {
  TF_ASSIGN_OR_RETURN(BatchFit result, search(device, margin, /*upper=*/true));
  result.central_max_batch = result.max_batch;
  if (bounded_by_workspaces_) {
    TF_ASSIGN_OR_RETURN(const BatchFit central, search(device, margin, /*upper=*/false));
    result.central_max_batch = central.max_batch;
  }
  return result;
}

Result<BatchFit> BatchSearch::search(const DeviceProfile& device, double margin, bool upper) {
  TF_CHECK(device.total_bytes >= 0) << "fit needs a device with known memory";
  BatchFit result;
  const int64_t budget = device.total_bytes - margin_bytes(device.total_bytes, margin);
  result.budget_bytes = budget;
  // Invariant: lo fits (0 trivially), hi does not (kMaxSearchBatch + 1 by assumption).
  //
  // The search steers by its own probes only; estimates another search made are reused, not
  // steered by. Reserved memory is not monotone in the batch (where the allocator's blocks
  // land changes with every size), so near the limit a batch can fit where a smaller one does
  // not, and a search seeded by other GPUs' probes would settle on another edge than the same
  // search run alone: `fit --gpu all` must say what `fit --gpu X` says.
  int64_t lo = 0;
  int64_t hi = kMaxSearchBatch + 1;
  std::vector<int64_t> probed;
  // Device use is close to affine in the batch: the next probe is where the line through the
  // bracket's ends (or, before there is an upper end, the last two probes) crosses the budget.
  // Allocator rounding bends the line, so every guess is checked, and each probe
  // from the fourth inside a bracket bisects, so that a bent curve cannot stall the search.
  const auto used = [&](int64_t batch) -> std::optional<double> {
    if (std::find(probed.begin(), probed.end(), batch) == probed.end()) return std::nullopt;
    auto it = unbounded_.find(std::make_tuple(device.target.sm, device.target.sm_count,
                                              device.cublas_workspace_bytes, device.context_bytes,
                                              batch));
    if (it == unbounded_.end()) return std::nullopt;
    return static_cast<double>(it->second.used(upper));
  };
  const auto crossing = [&](int64_t b1, int64_t b2) -> std::optional<int64_t> {
    const std::optional<double> d1 = used(b1);
    const std::optional<double> d2 = used(b2);
    if (!d1 || !d2 || b1 == b2 || *d2 <= *d1) return std::nullopt;
    const double slope = (*d2 - *d1) / static_cast<double>(b2 - b1);
    const double cross = static_cast<double>(b1) + (static_cast<double>(budget) - *d1) / slope;
    return static_cast<int64_t>(
        std::floor(std::clamp(cross, 0.0, static_cast<double>(kMaxSearchBatch))));
  };
  int64_t last = 0;
  int bracketed_steps = 0;
  int64_t past_lo = 1;
  while (hi - lo > 1) {
    int64_t guess = 0;
    const bool bracketed = hi <= kMaxSearchBatch;
    if (lo == 0 && !used(1)) {
      guess = 1;
    } else if (bracketed && bracketed_steps >= 3) {
      guess = lo + (hi - lo) / 2;
    } else if (bracketed) {
      guess = crossing(lo == 0 ? 1 : lo, hi).value_or(lo + (hi - lo) / 2);
      if (guess == lo && last == lo) guess = lo + 1;  // just found lo: try the next one
    } else {
      // Above every probe so far: extrapolate along the longest baseline, from batch 1 to the
      // largest probe of any class (nearby probes differ by allocator rounding as much as by
      // the batch).
      int64_t largest = 0;
      for (const int64_t b : probed) largest = std::max(largest, b);
      const std::optional<int64_t> c = largest > 1 ? crossing(1, largest) : std::nullopt;
      guess = lo == 0 ? c.value_or(1) : std::min(c.value_or(lo * 16), lo * 16);
      // The long baseline can put the crossing at or below a batch that fits (its slope is
      // an average): step past lo by 1, 2, 4, ... so that a limit far above is bracketed in
      // a few probes rather than approached one batch at a time.
      if (lo > 0 && guess <= lo) {
        guess = lo + past_lo;
        past_lo *= 2;
      }
    }
    const int64_t batch = std::clamp(guess, lo + 1, hi - 1);
    Result<bool> ok = fits(device, margin, batch, upper);
    probed.push_back(batch);
    if (!ok.ok()) {
      // The same configuration built at a smaller batch: a size that overflows does not fit.
      if (lo == 0) return ok.status();
      ok = false;
    }
    if (*ok) {
      lo = batch;
    } else {
      hi = batch;
    }
    last = batch;
    if (bracketed) ++bracketed_steps;
  }
  result.max_batch = lo;
  result.at_search_limit = lo == kMaxSearchBatch;
  if (lo == 0) {
    TF_ASSIGN_OR_RETURN(const Probe one, unbounded(device, 1));
    result.next_device_used_bytes = one.used(upper);
    return result;
  }
  TF_ASSIGN_OR_RETURN(Probe at, unbounded(device, lo));
  if (at.used(upper) > result.budget_bytes) {
    TF_ASSIGN_OR_RETURN(at, run(device, margin, lo));  // fits through allocator retries
  }
  result.peak_allocated_bytes = at.allocated;
  result.peak_reserved_bytes = at.reserved;
  result.device_used_bytes = at.device_used;
  result.device_used_upper_bytes = at.device_used_upper;
  result.alloc_retries = at.retries;
  if (!result.at_search_limit) {
    Result<Probe> next = unbounded(device, lo + 1);
    if (next.ok()) result.next_device_used_bytes = next->used(upper);
  }
  return result;
}

}  // namespace trainfit
