#include <fmt/format.h>

#include <algorithm>

#include "base/units.h"
#include "report/format.h"
#include "report/html.h"
#include "report/html_page.h"
#include "report/json.h"
#include "report/svg.h"

namespace trainfit {
namespace {

constexpr size_t kHoverPoints = 1200;
constexpr size_t kLiveRows = 20;

int band_color(Phase p) {
  switch (p) {
    case Phase::kForward:
      return 1;
    case Phase::kBackward:
      return 2;
    case Phase::kOptimizer:
      return 3;
    default:
      return 0;
  }
}

std::string row_text(size_t i, const TimelineRow& r) {
  std::string where = r.op.empty()
                          ? std::string(phase_name(r.phase))
                          : fmt::format("{} in {}", r.op, r.module.empty() ? "-" : r.module);
  return fmt::format("event {} · iteration {} {}\n{}\nallocated {} · reserved {}", i, r.iteration,
                     phase_name(r.phase), where, format_bytes(r.allocated_bytes),
                     format_bytes(r.reserved_bytes));
}

std::string timeline_chart(const EstimateReport& report) {
  const std::vector<TimelineRow>& rows = report.timeline;
  const Estimate& e = report.estimate;
  LineChart c{.id = "memory-timeline",
              .title = "Allocated and reserved memory after every event of two iterations",
              .x_label = "event",
              .y_label = "bytes",
              .y_format = ValueFormat::kBytes};
  Series allocated{.name = "allocated", .color = 0};
  Series reserved{.name = "reserved", .color = 1};
  for (size_t i = 0; i < rows.size(); ++i) {
    allocated.x.push_back(static_cast<double>(i));
    allocated.y.push_back(static_cast<double>(rows[i].allocated_bytes));
    reserved.x.push_back(static_cast<double>(i));
    reserved.y.push_back(static_cast<double>(rows[i].reserved_bytes));
  }
  c.series = {reserved, allocated};
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    while (j < rows.size() && rows[j].phase == rows[i].phase &&
           rows[j].iteration == rows[i].iteration)
      ++j;
    c.bands.push_back({static_cast<double>(i), static_cast<double>(j),
                       fmt::format("iteration {} {}", rows[i].iteration, phase_name(rows[i].phase)),
                       band_color(rows[i].phase)});
    i = j;
  }
  auto peak = std::find_if(rows.begin(), rows.end(), [&](const TimelineRow& r) {
    return r.allocated_bytes == e.peak_allocated_bytes;
  });
  if (peak != rows.end()) {
    auto at = static_cast<size_t>(peak - rows.begin());
    c.marks.push_back(
        {static_cast<double>(at),
         static_cast<double>(peak->allocated_bytes),
         fmt::format("peak {}: {}{}", format_bytes(peak->allocated_bytes),
                     peak->op.empty() ? std::string(phase_name(peak->phase)) : peak->op,
                     peak->module.empty() ? "" : " in " + peak->module),
         "peak-allocated",
         {{"bytes", std::to_string(peak->allocated_bytes)},
          {"event", std::to_string(at)},
          {"op", peak->op},
          {"module", peak->module}}});
  }
  // Hover: the highest event of each stretch of the timeline.
  const size_t step = std::max<size_t>(1, (rows.size() + kHoverPoints - 1) / kHoverPoints);
  for (size_t i = 0; i < rows.size(); i += step) {
    size_t best = i;
    for (size_t k = i; k < std::min(rows.size(), i + step); ++k) {
      if (rows[k].allocated_bytes > rows[best].allocated_bytes) best = k;
    }
    c.hover.push_back({static_cast<double>(best), row_text(best, rows[best])});
  }
  return render_line_chart(c);
}

}  // namespace

std::string estimate_html(const EstimateReport& report) {
  const nlohmann::json j = estimate_json(report);
  const Estimate& e = report.estimate;
  const EstimateHeader& h = report.header;
  HtmlPage page(fmt::format("trainfit estimate: {}", model_title(h)),
                fmt::format("batch {}, {}, {}{}", h.batch, precision_label(h), optimizer_line(h),
                            h.device.gpu.empty() ? "" : ", on " + h.device.gpu_display));
  std::vector<std::pair<std::string, std::string>> figures = {
      {"Peak allocated", format_bytes(e.peak_allocated_bytes)},
      {"Peak reserved", format_bytes(e.peak_reserved_bytes)},
      {"Device used (nvidia-smi)", format_bytes(e.device_used_bytes)},
      {"Peak in", fmt::format("{}, iteration {}", phase_name(e.peak.phase), e.peak.iteration + 1)}};
  const std::string unmeasured = workspace_bound_reason(e);
  if (!unmeasured.empty()) {
    figures.emplace_back("Device used, up to", format_bytes(e.device_used_upper_bytes));
  }
  if (e.total_bytes > 0) {
    figures.emplace_back(e.fits ? "Fits, headroom" : "Does not fit, short by",
                         format_bytes(e.fits ? e.headroom_bytes : -e.headroom_bytes));
  }
  if (e.time) figures.emplace_back("Step time (predicted)", format_duration(e.time->step_s));
  page.figures(figures);
  if (!unmeasured.empty()) {
    std::string at_peak;
    for (const WorkspaceSourceRow& row : workspace_source_rows(e)) {
      at_peak += fmt::format("{}{} {}", at_peak.empty() ? "" : ", ", row.source,
                             format_bytes(row.bytes_at_peak));
    }
    page.paragraph(fmt::format(
        "Peak reserved up to {} and device used up to {}: {}, each taken at its upper bound. "
        "cuDNN workspaces alive at the allocated peak: {}.",
        format_bytes(e.peak_reserved_upper_bytes), format_bytes(e.device_used_upper_bytes),
        unmeasured, at_peak));
  }
  for (const std::string& note : h.notes) page.paragraph(note);

  if (!report.timeline.empty()) {
    page.section("Memory over the two iterations");
    page.add(timeline_chart(report));
  }
  page.section("What the peak is made of");
  BarChart by_category{.id = "breakdown",
                       .title = "Device used at the allocated peak, by category"};
  int color = 0;
  for (const auto& [category, bytes] : j["breakdown"].items()) {
    const auto b = bytes.get<int64_t>();
    if (b > 0) {
      by_category.bars.push_back({category,
                                  static_cast<double>(b),
                                  "",
                                  color % 8,
                                  {{"category", category}, {"bytes", std::to_string(b)}}});
    }
    ++color;
  }
  page.add(render_stacked_bar(by_category));
  if (!e.activations_by_module.empty()) {
    BarChart blocks{.id = "activations-by-block",
                    .title = "Activations alive at the peak, by block"};
    for (const auto& [module, bytes] : j["activations_by_module"].items()) {
      blocks.bars.push_back(
          {module,
           static_cast<double>(bytes.get<int64_t>()),
           "",
           0,
           {{"module", module}, {"bytes", std::to_string(bytes.get<int64_t>())}}});
    }
    std::sort(blocks.bars.begin(), blocks.bars.end(),
              [](const Bar& a, const Bar& b) { return a.value > b.value; });
    page.add(render_bar_chart(blocks));
  }
  if (!e.live_at_peak.empty()) {
    page.section("Largest tensors alive at the peak");
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < e.live_at_peak.size() && i < kLiveRows; ++i) {
      const LiveTensor& t = e.live_at_peak[i];
      rows.push_back({format_bytes(t.bytes), std::string(category_name(t.category)),
                      t.op.empty() ? "-" : t.op, t.module.empty() ? "-" : t.module,
                      std::string(phase_name(t.phase))});
    }
    page.table({"bytes", "category", "op", "module", "allocated in"}, rows,
               {true, false, false, false, false});
    if (e.live_at_peak.size() > kLiveRows) {
      page.paragraph(fmt::format("{} more in the JSON below.", e.live_at_peak.size() - kLiveRows));
    }
  }
  return page.render(j);
}

}  // namespace trainfit
