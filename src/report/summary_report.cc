#include "report/summary_report.h"

#include <fmt/format.h>

#include "base/units.h"
#include "report/table.h"

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

std::string_view profile_name(const KernelTarget& target) {
  return kDeviceNames.name(target.device);
}

std::string profile_description(const KernelTarget& target) {
  if (target.device == Device::kCpu) return "cpu (PyTorch 1.13 CPU kernels)";
  return "cuda (PyTorch 2.x CUDA kernels)";
}

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
  out += fmt::format("Inputs:             {} ({})\n", inputs_line(s), format_bytes(s.input_bytes));
  std::string per_sample;
  if (s.activation_bytes_per_sample >= 0) {
    per_sample = fmt::format(" ({} per sample, measured at batch 1)",
                             format_bytes(s.activation_bytes_per_sample));
  }
  out += fmt::format("Kept for backward:  {} at batch {}{}\n", format_bytes(s.activation_bytes),
                     s.batch, per_sample);
  for (const GraphFact& f : s.facts) {
    out += fmt::format("{:<20}{} ({})\n", f.key + ":", format_count(f.value), f.text);
  }
  return out;
}

nlohmann::json summary_json(const Summary& s, int max_depth) {
  nlohmann::json j;
  j["model"] = s.model;
  j["batch"] = s.batch;
  j["precision"] = precision_name(s.precision);
  j["device_profile"] = profile_name(s.target);
  j["inputs"] = nlohmann::json::array();
  for (const InputInfo& in : s.inputs) {
    j["inputs"].push_back(
        {{"name", in.name}, {"shape", in.shape}, {"dtype", dtype_name(in.dtype)}});
  }
  j["parameters"] = s.parameters;
  j["trainable_parameters"] = s.trainable_parameters;
  j["frozen_parameters"] = s.parameters - s.trainable_parameters;
  j["parameter_bytes"] = s.parameter_bytes;
  j["buffer_bytes"] = s.buffer_bytes;
  j["input_bytes"] = s.input_bytes;
  j["activation_bytes"] = s.activation_bytes;
  j["activation_bytes_per_sample"] = s.activation_bytes_per_sample;
  j["facts"] = nlohmann::json::object();
  for (const GraphFact& f : s.facts) j["facts"][f.key] = {{"value", f.value}, {"text", f.text}};
  j["modules"] = nlohmann::json::array();
  for (const ModuleRow& m : s.modules) {
    if (max_depth >= 0 && m.depth > max_depth) continue;
    j["modules"].push_back(
        {{"path", m.path},
         {"name", m.name},
         {"type", m.type},
         {"depth", m.depth},
         {"output_shape", m.has_output ? nlohmann::json(m.output_shape) : nlohmann::json()},
         {"repeated", m.repeated},
         {"parameters", m.parameters},
         {"trainable_parameters", m.trainable_parameters},
         {"kept_bytes", m.kept_bytes},
         {"kept_bytes_per_sample", m.kept_bytes_per_sample}});
  }
  return j;
}

}  // namespace trainfit
