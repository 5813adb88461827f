#include "report/fit_report.h"

#include <algorithm>
#include <map>
#include <optional>

#include "base/units.h"

namespace trainfit {
namespace {

Status check(const FitRequest& f) {
  const DeviceProfile& d = f.request.device;
  if (!f.all_gpus && d.total_bytes < 0) {
    return invalid_argument("fit needs a GPU", "add --gpu NAME (see `trainfit gpus`) or --gpu all");
  }
  if (d.target.device != Device::kCuda) {
    return unsupported("fit plans for CUDA GPUs", "drop --device-profile cpu");
  }
  if (f.rank == Rank::kTime && !f.all_gpus && !f.what_if && f.target_batch == 0) {
    return invalid_argument("--rank time orders --what-if rows, --target-batch knobs or --gpu all",
                            "add --what-if, --target-batch N or --gpu all");
  }
  if (f.all_gpus) {
    if (d.total_bytes >= 0) {
      return invalid_argument("give --gpu or --gpu-memory, not both",
                              "--gpu-memory is for cards not in `trainfit gpus`");
    }
    if (d.calibration) {
      return invalid_argument("a GPU profile is one card's; --gpu all uses the catalog",
                              "give --gpu NAME for the card it was measured on");
    }
    if (f.what_if || f.target_batch > 0) {
      return invalid_argument("--what-if and --target-batch plan for one GPU",
                              "give --gpu NAME, e.g. --gpu rtx4090");
    }
  }
  return {};
}

// --gpu all: GPUs of one device class share a search (BatchSearch::device_class), in catalog
// order; the classes are searched side by side, each on an estimator of its own. Each card's
// answer and the estimates counted are those of one search over the catalog in turn.
Status fit_every_gpu(FitReport& report, const TrainingRequest& request, Estimator& estimator,
                     bool curve) {
  const std::vector<GpuSpec>& catalog = gpu_catalog();
  std::vector<DeviceProfile> devices;
  std::vector<std::vector<size_t>> classes;
  std::map<BatchSearch::DeviceClass, size_t> class_of;
  for (size_t i = 0; i < catalog.size(); ++i) {
    DeviceProfile device = cuda_profile(catalog[i]);
    // Each card's own CUDA context (measured on some), unless --cuda-context gave one: the row
    // is what `fit --gpu NAME` says.
    if (request.device.context_source == ContextSource::kGiven) {
      device.context_bytes = request.device.context_bytes;
      device.context_source = ContextSource::kGiven;
    }
    const auto [it, added] = class_of.emplace(BatchSearch::device_class(device), classes.size());
    if (added) classes.emplace_back();
    classes[it->second].push_back(i);
    devices.push_back(std::move(device));
  }
  std::vector<std::optional<Result<GpuFit>>> rows(catalog.size());  // none: not searched
  std::vector<int> estimates(classes.size(), 0);
  parallel_estimates(estimator, classes.size(), [&](Estimator& mine, size_t c) {
    BatchSearch search(mine, request);
    for (const size_t i : classes[c]) {
      rows[i] = [&]() -> Result<GpuFit> {
        TF_ASSIGN_OR_RETURN(BatchFit fit, search.fit(devices[i], report.margin));
        std::optional<StepTime> time;
        if (fit.max_batch > 0) {
          TrainingRequest at = request;
          at.batch = fit.max_batch;
          at.device = devices[i];
          TF_ASSIGN_OR_RETURN(time, predict_step_time(at));
        }
        std::vector<BatchPoint> points;
        if (curve) {
          TF_ASSIGN_OR_RETURN(points, search.curve(devices[i], fit));
        }
        return GpuFit{catalog[i], fit, time, std::move(points)};
      }();
      if (!rows[i]->ok()) break;  // as one search over the catalog in turn would stop
    }
    estimates[c] = search.estimates();
  });
  for (std::optional<Result<GpuFit>>& row : rows) {
    if (!row) continue;  // after a card that failed: the first failure is returned
    if (!row->ok()) return row->status();
    report.gpus.push_back(**std::move(row));
  }
  report.estimates = 0;
  for (const int n : estimates) report.estimates += n;
  if (report.rank == Rank::kTime) {
    const auto rate = [](const GpuFit& g) { return g.time ? g.time->samples_per_s : -1.0; };
    std::stable_sort(report.gpus.begin(), report.gpus.end(),
                     [&](const GpuFit& a, const GpuFit& b) { return rate(a) > rate(b); });
  }
  return {};
}

}  // namespace

Result<FitReport> make_fit_report(const FitRequest& f) {
  PipelineEstimator estimator;
  return make_fit_report(f, estimator);
}

Result<FitReport> make_fit_report(const FitRequest& f, Estimator& estimator) {
  TF_RETURN_IF_ERROR(check(f));
  FitReport report;
  report.rank = f.rank;
  TrainingRequest request = f.request;
  report.margin = request.margin.value_or(kDefaultMargin);
  request.margin = report.margin;
  if (f.all_gpus) request.margin.reset();  // each GPU's own, in the search
  TF_ASSIGN_OR_RETURN(const ResolvedRequest resolved, resolve(request));
  report.header = header_of(resolved);
  // A config.json's fields are the model; the report lists the --set values given beside it.
  report.sets.assign(request.sets.begin() + static_cast<std::ptrdiff_t>(
                                                std::min(request.hf_sets, request.sets.size())),
                     request.sets.end());
  report.freeze = request.freeze;
  if (f.all_gpus) {
    TF_RETURN_IF_ERROR(fit_every_gpu(report, request, estimator, f.curve));
    return report;
  }
  report.device = request.device;
  report.margin_bytes = resolved.options.margin_bytes;
  BatchSearch search(estimator, request);
  TF_ASSIGN_OR_RETURN(report.fit, search.fit(request.device, report.margin));
  if (f.curve) {
    TF_ASSIGN_OR_RETURN(report.curve, search.curve(request.device, report.fit));
  }
  report.estimates = search.estimates();

  // The batch the what-if rows are estimated at: the user's, else the largest that fits.
  if (!f.batch_given) request.batch = std::max<int64_t>(1, report.fit.max_batch);
  std::vector<Knob> knobs;
  if (f.what_if || f.target_batch > 0) {
    TF_ASSIGN_OR_RETURN(knobs, memory_knobs(request, request.device));
  }
  if (f.what_if) {
    WhatIfReport w;
    w.batch = request.batch;
    TF_ASSIGN_OR_RETURN(w.what_if, what_if(estimator, request, knobs, f.rank));
    report.estimates += w.what_if.estimates;
    report.what_if = std::move(w);
  }
  if (f.target_batch != 0) {
    TF_ASSIGN_OR_RETURN(TargetPlan plan, plan_target(estimator, request, knobs, f.target_batch,
                                                     f.allow_model_changes, f.rank));
    report.estimates += plan.combinations_tried;
    report.target = std::move(plan);
  }
  return report;
}

std::string next_batch_needs(const BatchFit& fit, int64_t total_bytes) {
  if (fit.next_device_used_bytes >= 0) return format_bytes(fit.next_device_used_bytes);
  return "over " + format_bytes(total_bytes);
}

std::string next_batch_needs_long(const BatchFit& fit, int64_t total_bytes) {
  std::string s = next_batch_needs(fit, total_bytes);
  if (fit.next_device_used_bytes < 0 && fit.next_unlimited_bytes > 0) {
    s += " (" + format_bytes(fit.next_unlimited_bytes) + " on a GPU with unlimited memory)";
  }
  return s;
}

}  // namespace trainfit
