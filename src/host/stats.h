// The small statistics the host commands report over their samples.
//
//   Percentiles p = percentiles(work_ms);   // nearest rank: p50, p99, max
//   double m = mean(cpu_mhz);               // 0 for no samples
#pragma once

#include <vector>

namespace trainfit {

// Nearest-rank percentiles of a sample; all zero for an empty one.
struct Percentiles {
  double p50 = 0;
  double p99 = 0;
  double max = 0;
};
Percentiles percentiles(std::vector<double> values);

// The arithmetic mean; 0 for no values.
double mean(const std::vector<double>& values);

}  // namespace trainfit
