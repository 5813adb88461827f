// The `trainfit estimate` report: text, JSON, and the timeline as CSV.
//
//   EstimateHeader h{"resnet50", 32, Precision::kFp32, ...};
//   std::string text = estimate_text(h, estimate);
//   nlohmann::json j = estimate_json(h, estimate);
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "estimate/estimate.h"
#include "lower/optimizer_step.h"

namespace trainfit {

// What was estimated, for the report's first lines.
struct EstimateHeader {
  std::string model;
  int64_t batch = 1;
  Precision precision = Precision::kFp32;
  OptimizerConfig optimizer;
  OptimizerImpl resolved_impl = OptimizerImpl::kLoop;
  DeviceProfile device;
  TrainingConfig training;
  std::vector<std::string> notes;  // caveats about this estimate, one sentence each
};

// "adamw (foreach), weight_decay 0.0001, 4 micro-batches per step"
std::string optimizer_line(const EstimateHeader& header);

std::string estimate_text(const EstimateHeader& header, const Estimate& e);
nlohmann::json estimate_json(const EstimateHeader& header, const Estimate& e);
// One row per event: event,iteration,phase,module,op,allocated_bytes,reserved_bytes.
std::string timeline_csv(const EventNames& names, const Estimate& e);

}  // namespace trainfit
