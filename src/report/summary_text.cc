#include <fmt/format.h>

#include "base/units.h"
#include "report/format.h"
#include "report/table.h"
#include "report/text.h"

namespace trainfit {
namespace {

constexpr size_t kWidth = 100;

std::string inputs_line(const Summary& s) {
  std::string line;
  for (const InputInfo& in : s.inputs) {
    if (!line.empty()) line += ", ";
    line += fmt::format("{} {} {}", in.name, shape_string(in.shape), dtype_name(in.dtype));
  }
  return line;
}

}  // namespace

std::string summary_text(const Summary& s, int max_depth) {
  const bool any_frozen = s.parameters != s.trainable_parameters;
  std::vector<Column> columns = {{"Module", Align::kLeft, true},
                                 {"Type", Align::kLeft, true},
                                 {"Output", Align::kLeft, false},
                                 {"Params", Align::kRight, false}};
  if (any_frozen) columns.push_back({"Frozen", Align::kRight, false});
  columns.push_back({"Kept/sample", Align::kRight, false});
  columns.push_back({"Kept/batch", Align::kRight, false});
  TextTable table(std::move(columns));
  for (const ModuleRow& m : s.modules) {
    if (max_depth >= 0 && m.depth > max_depth) continue;
    std::vector<std::string> row;
    row.push_back(std::string(static_cast<size_t>(2 * m.depth), ' ') + m.name);
    row.push_back(m.type);
    row.push_back(m.has_output ? shape_string(m.output_shape) : "-");
    row.push_back(m.parameters == 0 ? "-" : format_count(m.parameters));
    if (any_frozen) {
      const int64_t frozen = m.parameters - m.trainable_parameters;
      row.push_back(frozen == 0 ? "-" : format_count(frozen));
    }
    row.push_back(m.kept_bytes_per_sample < 0    ? "?"
                  : m.kept_bytes_per_sample == 0 ? "-"
                                                 : format_bytes(m.kept_bytes_per_sample));
    row.push_back(m.kept_bytes == 0 ? "-" : format_bytes(m.kept_bytes));
    table.add_row(std::move(row));
  }
  std::string out = fmt::format("{}, batch {}, {}, profile {}\n\n", s.model, s.batch,
                                precision_name(s.precision), profile_description(s.target));
  out += table.render(kWidth);
  out += '\n';
  out += fmt::format("Parameters:         {} ({}), {} trainable, {} frozen\n",
                     format_count(s.parameters), format_bytes(s.parameter_bytes),
                     format_count(s.trainable_parameters),
                     format_count(s.parameters - s.trainable_parameters));
  out += fmt::format("Buffers:            {}\n", format_bytes(s.buffer_bytes));
  if (s.inputs.empty()) {
    out += fmt::format("Inputs:             {}\n", format_bytes(s.input_bytes));
  } else {
    out +=
        fmt::format("Inputs:             {} ({})\n", inputs_line(s), format_bytes(s.input_bytes));
  }
  std::string per_sample;
  if (s.activation_bytes_per_sample >= 0) {
    per_sample = fmt::format(" ({} per sample, {})", format_bytes(s.activation_bytes_per_sample),
                             s.from_trace ? "from the traced batches" : "measured at batch 1");
  }
  out += fmt::format("Kept for backward:  {} at batch {}{}\n", format_bytes(s.activation_bytes),
                     s.batch, per_sample);
  for (const GraphFact& f : s.facts) {
    out += fmt::format("{:<20}{} ({})\n", f.key + ":", format_count(f.value), f.text);
  }
  return out;
}

}  // namespace trainfit
