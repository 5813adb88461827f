// A fake estimator for the planner's tests: device use follows a simple curve whose answers
// the tests can compute by brute force, and the knobs change it in known ways.
//
//   FakeEstimator fake;
//   BatchSearch search(fake, fake.request(24 * kGiB));
//   fake.fits(request_at_batch) ... fake.calls
//
// Allocated bytes are fixed + per_sample x batch, with per_sample shrunk by AMP (x0.6) and
// checkpointing (x0.5) and any --set (x0.25, a smaller model), and fixed halved by SGD; reserved
// adds `cache_share` of it, rounds up to 20 MiB and, without expandable segments, adds 64 MiB of
// cache. Device used adds the CUDA context. On a bounded device a run whose cache does not fit
// still fits when its live bytes (and 64 MiB) do: the allocator frees its cache and retries, as the
// real one does.
//
// A step takes `sample_s` per sample, times 0.5 under AMP bf16 and 0.6 under AMP fp16, 1.3 with
// checkpointing, 0.95 with the fused optimizer, 0.9 with SGD and 0.4 with a smaller model;
// `timed = false` gives no step time (a device without timing constants).
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>

#include "pipeline/estimator.h"

namespace trainfit {

inline constexpr int64_t kGiB = int64_t{1} << 30;

class FakeEstimator final : public Estimator {
 public:
  int64_t fixed_bytes = 1000 * kMiB;
  int64_t per_sample_bytes = 40 * kMiB;
  double cache_share = 0;
  double sample_s = 1e-3;
  bool timed = true;
  std::optional<int64_t> fails_above;  // batches above this are an error (an overflow)
  bool reject_amp_with_expandable = false;
  int calls = 0;
  int rejected = 0;

  TrainingRequest request(int64_t total_bytes, double margin = 0.05) const {
    TrainingRequest r;
    r.model = "fake";
    r.device.total_bytes = total_bytes;
    r.margin = margin;
    return r;
  }

  int64_t allocated(const TrainingRequest& r) const {
    double per_sample = static_cast<double>(per_sample_bytes);
    if (r.precision != Precision::kFp32) per_sample *= 0.6;
    if (!r.checkpoint.empty()) per_sample *= 0.5;
    if (!r.sets.empty()) per_sample *= 0.25;  // a smaller model
    const auto samples = static_cast<double>(r.batch);
    const int64_t fixed = r.optimizer == OptimizerKind::kSgd ? fixed_bytes / 2 : fixed_bytes;
    return fixed + static_cast<int64_t>(per_sample * samples);
  }

  // Without a memory limit.
  int64_t device_used(const TrainingRequest& r) const {
    const auto cached = static_cast<int64_t>(static_cast<double>(allocated(r)) * (1 + cache_share));
    const int64_t reserved = (cached + 20 * kMiB - 1) / (20 * kMiB) * (20 * kMiB) +
                             (r.expandable_segments ? 0 : 64 * kMiB);
    return reserved + r.device.context_bytes;
  }

  double step_s(const TrainingRequest& r) const {
    double s = sample_s * static_cast<double>(r.batch * r.grad_accum);
    if (r.precision == Precision::kAmpBf16) s *= 0.5;
    if (r.precision == Precision::kAmpFp16) s *= 0.6;
    if (!r.checkpoint.empty()) s *= 1.3;
    if (r.optimizer_impl == OptimizerImpl::kFused) s *= 0.95;
    if (r.optimizer == OptimizerKind::kSgd) s *= 0.9;
    if (!r.sets.empty()) s *= 0.4;
    return s;
  }

  int64_t budget(const TrainingRequest& r) const {
    return r.device.total_bytes - margin_bytes(r.device.total_bytes, r.margin.value_or(0));
  }

  // Fits only by freeing the cache mid-step.
  bool retries(const TrainingRequest& r) const {
    return r.device.total_bytes >= 0 && device_used(r) > budget(r);
  }

  bool fits(const TrainingRequest& r) const {
    if (!retries(r)) return true;
    return allocated(r) + 64 * kMiB + r.device.context_bytes <= budget(r);
  }

  Result<Estimate> estimate(const TrainingRequest& r, const EstimateDetail& detail) override {
    ++calls;
    if (fails_above && r.batch > *fails_above) {
      return out_of_range("the batch overflows", "use a smaller batch");
    }
    if (reject_amp_with_expandable && r.precision != Precision::kFp32 && r.expandable_segments) {
      ++rejected;
      return invalid_argument("AMP and expandable segments conflict in this fake", "drop one");
    }
    Estimate e;
    e.peak_allocated_bytes = allocated(r);
    e.cuda_context_bytes = r.device.context_bytes;
    e.device_used_bytes = retries(r) ? std::min(device_used(r), budget(r)) : device_used(r);
    e.num_alloc_retries = retries(r) ? 1 : 0;
    e.peak_reserved_bytes = e.device_used_bytes - e.cuda_context_bytes;
    e.total_bytes = r.device.total_bytes;
    e.fits = fits(r);
    if (timed && detail.step_time) {
      StepTime t;
      t.step_s = step_s(r);
      t.samples = r.batch * r.grad_accum;
      t.samples_per_s = static_cast<double>(t.samples) / t.step_s;
      e.time = t;
    }
    return e;
  }
};

}  // namespace trainfit
