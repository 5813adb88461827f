// Reports as one self-contained HTML page each (`--html FILE`): the charts of what text prints
// as tables, drawn from the same report data, with the --json object embedded, so that the page
// and --json give the same numbers. Another output format beside text.h and json.h.
//
//   std::ofstream("report.html") << estimate_html(*make_estimate_report(request,
//                                                  {.timeline = true, .explain = true}));
#pragma once

#include <string>
#include <vector>

#include "graph/summary.h"
#include "report/compare_report.h"
#include "report/estimate_report.h"
#include "report/fit_report.h"
#include "report/launch_report.h"
#include "report/loader_report.h"
#include "schedule/schedule.h"

namespace trainfit {

// With the report's timeline (EstimateDetail::timeline) the memory over both iterations; with
// its live tensors (EstimateDetail::explain) the largest of them.
std::string estimate_html(const EstimateReport& report);
// With FitRequest::curve, device used against batch size for each GPU.
std::string fit_html(const FitReport& report);
std::string compare_html(const std::vector<CompareEntry>& entries);
std::string summary_html(const Summary& summary, int max_depth);
std::string loader_html(const LoaderReport& report);
std::string launch_html(const LaunchReport& report);
std::string schedule_html(const Schedule& schedule);

}  // namespace trainfit
