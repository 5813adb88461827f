// Human-readable numbers for reports.
//
//   format_bytes(102760448) == "98.0 MiB"; format_count(25557032) == "25,557,032"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "estimate/estimate.h"

namespace trainfit {

// Binary units with three significant digits: "512 B", "1.50 KiB", "98.0 MiB", "3.01 GiB".
std::string format_bytes(int64_t bytes);
// Thousands separators: "25,557,032".
std::string format_count(int64_t n);

// Largest first, at most `max_rows` lines: the rows under `share` of their total (and those
// past the limit) fold into one "other (N blocks)" row, so a report shows what matters at a
// glance.
std::vector<ModuleBytes> largest_first(std::vector<ModuleBytes> rows, double share = 0.01,
                                       size_t max_rows = SIZE_MAX);

}  // namespace trainfit
