#include "host/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace trainfit {

Percentiles percentiles(std::vector<double> values) {
  Percentiles p;
  if (values.empty()) return p;
  std::sort(values.begin(), values.end());
  const auto rank = [&](double q) {
    const auto n = static_cast<double>(values.size());
    const auto i = static_cast<size_t>(std::max(1.0, std::ceil(q * n)));
    return values[std::min(i, values.size()) - 1];
  };
  p.p50 = rank(0.50);
  p.p99 = rank(0.99);
  p.max = values.back();
  return p;
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

}  // namespace trainfit
