// A validation curve from a training log: one column of a CSV file, one value per epoch. Reads
// what loggers write: Lightning's CSVLogger (rows without the column are skipped), TensorBoard's
// scalars exported as CSV ("Wall time,Step,Value"), or a plain column of numbers.
//
//   Result<MetricsCurve> c = parse_metrics_csv(text, "metrics.csv", "");   // the one metric
//   Result<MetricsCurve> v = parse_metrics_csv(text, "metrics.csv", "val_loss");
//   c->values[epoch]
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace trainfit {

struct MetricsCurve {
  std::string column;          // its header, or "column 1" without one
  std::vector<double> values;  // in file order, one per epoch
  std::vector<int64_t> lines;  // the line each value came from, from 1
};

// `column` empty: the only numeric column that is not a counter (epoch, step, time), or the
// only such column whose name starts with "val". `file` names the file in errors.
Result<MetricsCurve> parse_metrics_csv(std::string_view text, std::string_view file,
                                       std::string_view column);

}  // namespace trainfit
