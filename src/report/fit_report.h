// The `trainfit fit` report as data: the largest batch on one GPU (or every catalog GPU), and
// on request what each memory knob does (what-if) and how to reach a target batch. text.h and
// json.h render it.
//
//   FitRequest f;
//   f.request = request;          // its GPU and margin (nullopt: kDefaultMargin)
//   f.what_if = true;
//   Result<FitReport> r = make_fit_report(f);
//   r->fit.max_batch, r->what_if->rows ...
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/target.h"
#include "plan/what_if.h"
#include "report/estimate_report.h"

namespace trainfit {

struct FitRequest {
  TrainingRequest request;
  bool all_gpus = false;     // one row per catalog GPU instead of the request's GPU
  bool batch_given = false;  // what-if rows at request.batch; else at the largest that fits
  bool what_if = false;
  int64_t target_batch = 0;  // 0: none
  bool allow_model_changes = false;
  bool curve = false;  // memory against batch size for each GPU (BatchSearch::curve)
  // Rank::kTime: what-if rows fastest first, the target batch's knobs by least step time, and
  // with all_gpus the GPUs by samples/s (else catalog order).
  Rank rank = Rank::kMemory;
};

struct GpuFit {
  GpuSpec gpu;
  BatchFit fit;
  std::optional<StepTime> time;   // at the largest batch
  std::vector<BatchPoint> curve;  // with FitRequest::curve
};

struct WhatIfReport {
  int64_t batch = 0;  // the rows' batch
  WhatIf what_if;
};

struct FitReport {
  // What was planned: the model and recipe, the margin, and the GPU (one GPU only).
  EstimateHeader header;
  std::vector<std::pair<std::string, std::string>> sets;
  std::vector<std::string> freeze;
  double margin = 0;
  DeviceProfile device;
  int64_t margin_bytes = 0;

  Rank rank = Rank::kMemory;
  std::vector<GpuFit> gpus;       // with FitRequest::all_gpus, in catalog order or by samples/s
  BatchFit fit;                   // on the one GPU
  std::vector<BatchPoint> curve;  // on the one GPU, with FitRequest::curve
  std::optional<WhatIfReport> what_if;
  std::optional<TargetPlan> target;
  int estimates = 0;  // estimates the plan took
};

Result<FitReport> make_fit_report(const FitRequest& request);
// The same on a given estimator (a test's, which remembers its answers across reports).
Result<FitReport> make_fit_report(const FitRequest& request, Estimator& estimator);

// What the batch after the largest needs on a GPU of `total_bytes` without the margin: its
// device use, or "over" the GPU's memory where it does not fit that either.
std::string next_batch_needs(const BatchFit& fit, int64_t total_bytes);
// The same, and where it does not fit the whole GPU what a GPU with unlimited memory shows.
std::string next_batch_needs_long(const BatchFit& fit, int64_t total_bytes);

}  // namespace trainfit
