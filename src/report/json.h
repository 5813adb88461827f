// Reports as JSON: one object per report, the names DESIGN.md promises (`--json`, and the
// dicts the Python binding returns).
//
//   std::cout << estimate_json(*make_estimate_report(request)).dump(2);
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "graph/summary.h"
#include "report/compare_report.h"
#include "report/estimate_report.h"
#include "report/fit_report.h"
#include "report/launch_report.h"
#include "report/loader_report.h"
#include "schedule/schedule.h"

namespace trainfit {

nlohmann::json estimate_json(const EstimateHeader& header, const Estimate& estimate);
nlohmann::json scaling_json(const ScalingPlan& plan);
nlohmann::json speedups_json(const std::vector<Speedup>& speedups);
inline nlohmann::json estimate_json(const EstimateReport& report) {
  nlohmann::json j = estimate_json(report.header, report.estimate);
  if (report.scaling) j["scaling"] = scaling_json(*report.scaling);
  if (report.estimate.time) j["speedups"] = speedups_json(report.speedups);
  return j;
}
nlohmann::json fit_json(const FitReport& report);
nlohmann::json compare_json(const std::vector<CompareEntry>& entries);  // {"models": [...]}
// Modules down to `max_depth` (-1: all).
nlohmann::json summary_json(const Summary& summary, int max_depth);
nlohmann::json loader_json(const LoaderReport& report);
nlohmann::json launch_json(const LaunchReport& report);
// `lr` is group 0's learning rate at every step; `lr_groups` every group's, with more than one.
nlohmann::json schedule_json(const Schedule& schedule);
std::string_view interval_name(StepInterval interval);  // "epoch" / "step"

}  // namespace trainfit
