#include "plan/batch_search.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "base/parallel.h"

namespace trainfit {

Result<BatchSearch::Probe> BatchSearch::run(const DeviceProfile& device, double margin,
                                            int64_t batch) {
  ++estimates_;
  return probe_on(estimator_, device, margin, batch);
}

Result<BatchSearch::Probe> BatchSearch::probe_on(Estimator& estimator, const DeviceProfile& device,
                                                 double margin, int64_t batch) const {
  TrainingRequest r = base_;
  r.batch = batch;
  r.device = device;
  r.margin.reset();
  if (device.total_bytes >= 0) r.margin = margin;
  // A probe that runs out only needs to say so, and none needs the step time.
  TF_ASSIGN_OR_RETURN(const Estimate e,
                      estimator.estimate(r, {.peak_after_oom = false, .step_time = false}));
  // The upper figures are never below the central ones.
  const int64_t used_upper = std::max(e.device_used_upper_bytes, e.device_used_bytes);
  const bool fits_upper = e.fits && e.fits_upper;
  return Probe{e.peak_allocated_bytes,
               std::max(e.peak_allocated_upper_bytes, e.peak_allocated_bytes),
               e.peak_reserved_bytes,
               e.device_used_bytes,
               used_upper,
               e.num_alloc_retries,
               e.fits,
               fits_upper};
}

Result<BatchSearch::Probe> BatchSearch::unbounded(const DeviceProfile& device, int64_t batch) {
  const auto key = std::make_pair(device_class(device), batch);
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

BatchSearch::BoundedKey BatchSearch::bounded_key(const DeviceProfile& device, double margin,
                                                 int64_t batch) {
  const int64_t budget = device.total_bytes - margin_bytes(device.total_bytes, margin);
  return {device_class(device), budget, batch};
}

Result<std::optional<BatchSearch::Probe>> BatchSearch::walk_down(const DeviceProfile& device,
                                                                 double margin, int64_t from,
                                                                 bool upper) {
  // The first batch alone: most walks end there. Then as many batches at once as there are
  // threads idle (base/parallel.h), of which those down to the first that fits count and are
  // kept, as if tried one by one; the ones past it are dropped.
  std::optional<bool> side_by_side;  // whether the estimator forks, asked once it matters
  for (int64_t top = from; top >= 1;) {
    int64_t n = 1;
    if (top != from && idle_workers() > 0) {
      if (!side_by_side) side_by_side = estimator_.fork() != nullptr;
      if (*side_by_side) n = std::min<int64_t>(top, 1 + static_cast<int64_t>(idle_workers()));
    }
    std::vector<std::optional<Result<Probe>>> tried(static_cast<size_t>(n));
    std::vector<size_t> to_try;
    for (int64_t i = 0; i < n; ++i) {
      auto it = bounded_.find(bounded_key(device, margin, top - i));
      if (it != bounded_.end()) {
        tried[static_cast<size_t>(i)] = it->second;
      } else {
        to_try.push_back(static_cast<size_t>(i));
      }
    }
    std::vector<std::optional<Result<Probe>>> probed(tried.size());
    parallel_estimates(estimator_, to_try.size(), [&](Estimator& mine, size_t k) {
      const size_t i = to_try[k];
      probed[i] = probe_on(mine, device, margin, top - static_cast<int64_t>(i));
    });
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = top - i;
      std::optional<Result<Probe>>& slot = tried[static_cast<size_t>(i)];
      if (!slot) {
        ++estimates_;
        slot = std::move(probed[static_cast<size_t>(i)]);
        if (slot->ok()) bounded_.emplace(bounded_key(device, margin, b), **slot);
      }
      Result<Probe>& p = *slot;
      if (!p.ok()) {
        if (b == 1) return p.status();
        continue;  // a size that overflows does not fit
      }
      if (upper ? p->fits_upper : p->fits) {
        p->batch = b;
        return std::optional<Probe>(*p);
      }
    }
    top -= n;
  }
  return std::optional<Probe>();
}

Result<int64_t> BatchSearch::first_over_budget(const DeviceProfile& device, int64_t budget,
                                               bool upper) {
  // Invariant: lo's live tensors fit the budget (0 trivially), hi's do not (past the search
  // limit by assumption). Peak allocated memory grows with the batch, so this is a search on a
  // monotone function, and an all but affine one: each probe after the first is where the line
  // through two probes crosses the budget, and from the fourth inside a bracket the probes
  // bisect, so that rounding cannot stall it.
  int64_t lo = 0;
  int64_t hi = kMaxSearchBatch + 1;
  std::vector<std::pair<int64_t, double>> seen;  // (batch, allocated + context)
  const auto over = [&](int64_t batch) -> Result<bool> {
    TF_ASSIGN_OR_RETURN(const Probe p, unbounded(device, batch));
    const int64_t live = (upper ? p.allocated_upper : p.allocated) + device.context_bytes;
    seen.emplace_back(batch, static_cast<double>(live));
    return live > budget;
  };
  const auto value = [&](int64_t batch) {
    for (const auto& [b, v] : seen) {
      if (b == batch) return v;
    }
    return 0.0;
  };
  const auto crossing = [&](int64_t b1, int64_t b2) -> std::optional<int64_t> {
    const double v1 = value(b1);
    const double v2 = value(b2);
    if (b1 == b2 || v2 <= v1) return std::nullopt;
    const double slope = (v2 - v1) / static_cast<double>(b2 - b1);
    const double cross = static_cast<double>(b1) + (static_cast<double>(budget) - v1) / slope;
    return static_cast<int64_t>(
        std::floor(std::clamp(cross, 0.0, static_cast<double>(kMaxSearchBatch + 1))));
  };
  int bracketed_steps = 0;
  while (hi - lo > 1) {
    int64_t guess = 0;
    const bool bracketed = hi <= kMaxSearchBatch;
    if (seen.empty()) {
      guess = 1;
    } else if (!bracketed) {
      // Above every probe: along the line from batch 1 to the largest, or 16 times further.
      const std::optional<int64_t> c = lo > 1 ? crossing(1, lo) : std::nullopt;
      guess = c ? std::min(*c + 1, lo * 16) : lo * 16;
    } else if (bracketed_steps >= 3) {
      guess = lo + (hi - lo) / 2;
    } else {
      // The crossing lies in (lo, hi]; its batch, or the one after the crossing, decides it.
      guess = crossing(lo == 0 ? 1 : lo, hi).value_or(lo + (hi - lo) / 2) + 1;
    }
    const int64_t batch = std::clamp(guess, lo + 1, std::min(hi - 1, kMaxSearchBatch));
    Result<bool> is_over = over(batch);
    if (!is_over.ok()) {
      // The same configuration built at a smaller batch: a size that overflows does not fit.
      if (lo == 0) return is_over.status();
      is_over = true;
    }
    if (*is_over) {
      hi = batch;
    } else {
      lo = batch;
    }
    if (bracketed) ++bracketed_steps;
    if (!bracketed && lo == kMaxSearchBatch) break;
  }
  return hi;
}

Result<BatchFit> BatchSearch::fit(const DeviceProfile& device, double margin) {
  TF_CHECK(device.total_bytes >= 0) << "fit needs a device with known memory";
  BatchFit result;
  const int64_t budget = device.total_bytes - margin_bytes(device.total_bytes, margin);
  result.budget_bytes = budget;
  // Note [The edge]: every batch from `over` on holds more live tensors than the budget, so
  // the largest batch that fits is below it; down from there, the first batch that fits is it.
  // Reserved memory is not monotone in the batch (where the allocator's segments land), so a
  // batch just under `over` can fail where a smaller one fits: the search walks down, it does
  // not bisect. The central figures first; the upper ones, which fit only where the central
  // ones do, from there or from below their own `over`, whichever is lower.
  TF_ASSIGN_OR_RETURN(const int64_t over, first_over_budget(device, budget, /*upper=*/false));
  TF_ASSIGN_OR_RETURN(const std::optional<Probe> central,
                      walk_down(device, margin, std::min(over - 1, kMaxSearchBatch),
                                /*upper=*/false));
  result.central_max_batch = central ? central->batch : 0;
  std::optional<Probe> at = central;
  if (central && !central->fits_upper) {
    TF_ASSIGN_OR_RETURN(const int64_t over_upper,
                        first_over_budget(device, budget, /*upper=*/true));
    TF_ASSIGN_OR_RETURN(
        at, walk_down(device, margin, std::min(over_upper, central->batch) - 1, /*upper=*/true));
  }
  const int64_t batch = at ? at->batch : 0;
  result.max_batch = std::max<int64_t>(batch, 0);
  result.at_search_limit = result.max_batch == kMaxSearchBatch;
  if (result.max_batch == 0) {
    TF_RETURN_IF_ERROR(next_needs(device, 1, result));
    return result;
  }
  result.peak_allocated_bytes = at->allocated;
  result.peak_reserved_bytes = at->reserved;
  result.device_used_bytes = at->device_used;
  result.device_used_upper_bytes = at->device_used_upper;
  result.alloc_retries = at->retries;
  if (!result.at_search_limit) {
    // A batch past the edge that overflows has no figures to give.
    if (!next_needs(device, result.max_batch + 1, result).ok()) {
      result.next_device_used_bytes = -1;
      result.next_unlimited_bytes = 0;
    }
  }
  return result;
}

Status BatchSearch::next_needs(const DeviceProfile& device, int64_t batch, BatchFit& fit) {
  // On the whole card, without the margin: what nvidia-smi would show if that batch ran.
  TF_ASSIGN_OR_RETURN(const Probe open, unbounded(device, batch));
  fit.next_unlimited_bytes = open.used(true);
  fit.next_device_used_bytes = open.used(true);
  if (open.used(true) <= device.total_bytes) return Status();
  TF_ASSIGN_OR_RETURN(const Probe whole, run(device, 0, batch));
  fit.next_device_used_bytes = whole.fits_upper ? whole.used(true) : -1;
  return Status();
}

}  // namespace trainfit
