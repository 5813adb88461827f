// Folding long lists of figures for reports (units.h formats the numbers).
//
//   largest_first(rows, 0.01, 6)   // the largest rows, the small ones as "other (N blocks)"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/units.h"
#include "estimate/estimate.h"

namespace trainfit {

// Largest first, at most `max_rows` lines: the rows under `share` of their total (and those
// past the limit) fold into one "other (N blocks)" row, so a report shows what matters at a
// glance.
std::vector<ModuleBytes> largest_first(std::vector<ModuleBytes> rows, double share = 0.01,
                                       size_t max_rows = SIZE_MAX);

}  // namespace trainfit
