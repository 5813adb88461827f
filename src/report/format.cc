#include "report/format.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainfit {

std::vector<ModuleBytes> largest_first(std::vector<ModuleBytes> rows, double share,
                                       size_t max_rows) {
  int64_t total = 0;
  for (const ModuleBytes& r : rows) total += r.bytes;
  std::stable_sort(rows.begin(), rows.end(),
                   [](const ModuleBytes& a, const ModuleBytes& b) { return a.bytes > b.bytes; });
  const auto large = [&](const ModuleBytes& r) {
    return static_cast<double>(r.bytes) >= share * static_cast<double>(total);
  };
  size_t keep = 0;
  while (keep < rows.size() && keep < max_rows && large(rows[keep])) ++keep;
  if (rows.size() - keep == 1 && keep < max_rows) ++keep;  // a lone leftover shows as itself
  if (keep < rows.size()) {
    if (keep == max_rows) --keep;  // make room for the "other" line
    ModuleBytes rest{fmt::format("other ({} blocks)", rows.size() - keep), 0};
    for (size_t i = keep; i < rows.size(); ++i) rest.bytes += rows[i].bytes;
    rows.resize(keep);
    rows.push_back(std::move(rest));
  }
  return rows;
}

}  // namespace trainfit
