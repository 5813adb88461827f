#include "report/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace trainfit {

std::string format_bytes(int64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool negative = bytes < 0;
  double v = std::fabs(static_cast<double>(bytes));
  size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < kUnits.size()) {
    v /= 1024.0;
    ++unit;
  }
  std::string number;
  if (unit == 0) {
    number = fmt::format("{}", static_cast<int64_t>(v));
  } else if (v < 9.995) {
    number = fmt::format("{:.2f}", v);
  } else if (v < 99.95) {
    number = fmt::format("{:.1f}", v);
  } else {
    number = fmt::format("{:.0f}", v);
  }
  return fmt::format("{}{} {}", negative ? "-" : "", number, kUnits[unit]);
}

std::string format_count(int64_t n) {
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

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
