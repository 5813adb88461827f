#include <fmt/format.h>

#include "report/csv.h"

namespace trainfit {

std::string timeline_csv(const EstimateReport& report) {
  std::string out =
      "event,iteration,phase,module,op,action,category,bytes,allocated_bytes,reserved_bytes\n";
  for (size_t i = 0; i < report.timeline.size(); ++i) {
    const TimelineRow& r = report.timeline[i];
    out += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", i, r.iteration, phase_name(r.phase),
                       r.module, r.op,
                       r.empty_cache ? "empty_cache"
                       : r.alloc     ? "alloc"
                                     : "free",
                       category_name(r.category), r.bytes, r.allocated_bytes, r.reserved_bytes);
  }
  return out;
}

}  // namespace trainfit
