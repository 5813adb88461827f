// Reports as CSV, for spreadsheets and plotting.
//
//   std::ofstream("memory.csv") << timeline_csv(*make_estimate_report(r, {.timeline = true}));
#pragma once

#include <string>

#include "report/estimate_report.h"

namespace trainfit {

// One row per event: event,iteration,phase,module,op,allocated_bytes,reserved_bytes.
std::string timeline_csv(const EstimateReport& report);

}  // namespace trainfit
