#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/units.h"
#include "report/html.h"
#include "report/html_page.h"
#include "report/json.h"
#include "report/svg.h"

namespace trainfit {

std::string compare_html(const std::vector<CompareEntry>& entries) {
  std::vector<std::string> names;
  names.reserve(entries.size());
  for (const CompareEntry& e : entries) names.push_back(model_title(e.header));
  HtmlPage page("trainfit compare", fmt::format("{}", fmt::join(names, " vs ")));
  BarChart peak{.id = "peak-by-model", .title = "Peak allocated, by model"};
  BarChart used{.id = "device-used-by-model", .title = "Device used, by model"};
  std::vector<std::vector<std::string>> rows;
  int color = 0;
  for (const CompareEntry& e : entries) {
    const Estimate& m = e.estimate;
    peak.bars.push_back(
        {model_title(e.header),
         static_cast<double>(m.peak_allocated_bytes),
         "",
         color,
         {{"model", model_title(e.header)}, {"bytes", std::to_string(m.peak_allocated_bytes)}}});
    used.bars.push_back(
        {model_title(e.header),
         static_cast<double>(m.device_used_bytes),
         "",
         color,
         {{"model", model_title(e.header)}, {"bytes", std::to_string(m.device_used_bytes)}}});
    ++color;
    const Dominant d = dominant_category(m);
    rows.push_back({model_title(e.header), std::to_string(e.header.batch),
                    format_count(m.parameters), format_bytes(m.activation_bytes),
                    format_bytes(m.peak_allocated_bytes),
                    m.device_used_upper_bytes > m.device_used_bytes
                        ? fmt::format("{} (up to {})", format_bytes(m.device_used_bytes),
                                      format_bytes(m.device_used_upper_bytes))
                        : format_bytes(m.device_used_bytes),
                    fmt::format("{} {:.0f}%", category_name(d.category), d.share * 100)});
  }
  page.table({"model", "batch", "parameters", "activations", "peak allocated", "device used",
              "largest at the peak"},
             rows, {false, true, true, true, true, true, false});
  page.add(render_bar_chart(peak));
  page.add(render_bar_chart(used));
  page.section("Blocks side by side");
  for (const CompareEntry& e : entries) {
    BarChart kept{
        .id = "blocks-" + e.header.model,
        .title = fmt::format("{}: bytes one sample keeps, by block", model_title(e.header))};
    for (const BlockRow& b : e.per_sample.blocks) {
      kept.bars.push_back({b.block,
                           static_cast<double>(b.kept_bytes),
                           fmt::format("{} · {} parameters", format_bytes(b.kept_bytes),
                                       format_count(b.parameters)),
                           1,
                           {{"block", b.block},
                            {"kept-bytes", std::to_string(b.kept_bytes)},
                            {"parameters", std::to_string(b.parameters)}}});
    }
    page.add(render_bar_chart(kept));
  }
  return page.render(compare_json(entries));
}

}  // namespace trainfit
