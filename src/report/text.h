// Reports as text for a terminal: one function per report. Another output format is another
// header like this one and its files, not edits inside the commands.
//
//   std::cout << estimate_text(*make_estimate_report(request));
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

std::string estimate_text(const EstimateReport& report);
std::string fit_text(const FitReport& report);
std::string compare_text(const std::vector<CompareEntry>& entries);
// Modules down to `max_depth` (-1: all) in a 100-column table.
std::string summary_text(const Summary& summary, int max_depth);
std::string loader_text(const LoaderReport& report);
std::string launch_text(const LaunchReport& report);
// The learning rate as a terminal plot, with the plateau and early-stopping replays.
std::string schedule_text(const Schedule& schedule);
// The plan's settings as Python: "DataLoader(dataset, batch_size=32, num_workers=2, ...)".
std::string dataloader_call(const LoaderPlan& plan);

}  // namespace trainfit
