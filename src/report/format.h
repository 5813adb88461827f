// Human-readable numbers for reports.
//
//   format_bytes(102760448) == "98.0 MiB"; format_count(25557032) == "25,557,032"
#pragma once

#include <cstdint>
#include <string>

namespace trainfit {

// Binary units with three significant digits: "512 B", "1.50 KiB", "98.0 MiB", "3.01 GiB".
std::string format_bytes(int64_t bytes);
// Thousands separators: "25,557,032".
std::string format_count(int64_t n);

}  // namespace trainfit
