#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/units.h"
#include "report/html.h"
#include "report/html_page.h"
#include "report/json.h"
#include "report/svg.h"

namespace trainfit {
namespace {

constexpr double kCellBarWidth = 120;  // CSS pixels for the largest value

std::string cell_bar(int64_t value, int64_t max, std::string_view kind, const std::string& text) {
  double w = max > 0 ? kCellBarWidth * static_cast<double>(value) / static_cast<double>(max) : 0;
  return fmt::format("<span class=\"cellbar {}\" data-{}=\"{}\" style=\"width:{:.1f}px\"></span>{}",
                     kind, kind == "kept" ? "kept-bytes" : "parameters", value, w,
                     html_escape(text));
}

}  // namespace

std::string summary_html(const Summary& s, int max_depth) {
  HtmlPage page(fmt::format("trainfit summary: {}", s.model),
                fmt::format("batch {}, {}", s.batch, precision_name(s.precision)));
  page.figures({{"Parameters", format_count(s.parameters)},
                {"Trainable", format_count(s.trainable_parameters)},
                {"Kept for backward", format_bytes(s.activation_bytes)},
                {"Parameters' bytes", format_bytes(s.parameter_bytes)}});
  BarChart params{.id = "parameters-by-module",
                  .title = "Parameters by top-level module",
                  .format = ValueFormat::kNumber};
  BarChart kept{.id = "kept-by-module", .title = "Bytes kept for backward by top-level module"};
  int64_t max_params = 0, max_kept = 0;
  for (const ModuleRow& m : s.modules) {
    if (max_depth >= 0 && m.depth > max_depth) continue;
    if (m.depth == 1) {
      params.bars.push_back({m.path,
                             static_cast<double>(m.parameters),
                             format_count(m.parameters),
                             0,
                             {{"module", m.path}, {"parameters", std::to_string(m.parameters)}}});
      kept.bars.push_back({m.path,
                           static_cast<double>(m.kept_bytes),
                           "",
                           1,
                           {{"module", m.path}, {"kept-bytes", std::to_string(m.kept_bytes)}}});
    }
    max_params = std::max(max_params, m.parameters);
    max_kept = std::max(max_kept, m.kept_bytes);
  }
  if (!params.bars.empty()) {
    page.add(render_bar_chart(params));
    page.add(render_bar_chart(kept));
  }
  page.section("Modules");
  std::vector<std::vector<std::string>> rows;
  for (const ModuleRow& m : s.modules) {
    if (max_depth >= 0 && m.depth > max_depth) continue;
    std::string shape = m.has_output ? fmt::format("[{}]", fmt::join(m.output_shape, ", ")) : "";
    rows.push_back({fmt::format("<span style=\"padding-left:{}em\">{}</span>", m.depth,
                                html_escape(m.path.empty() ? m.name : m.path)),
                    html_escape(m.type),
                    fmt::format("<span class=\"shape\">{}</span>", html_escape(shape)),
                    cell_bar(m.parameters, max_params, "params", format_count(m.parameters)),
                    cell_bar(m.kept_bytes, max_kept, "kept", format_bytes(m.kept_bytes))});
  }
  page.html_table({"module", "type", "output", "parameters", "kept for backward"}, rows,
                  {false, false, false, false, false});
  return page.render(summary_json(s, max_depth));
}

}  // namespace trainfit
