#include <fmt/format.h>

#include "base/units.h"
#include "report/html.h"
#include "report/html_page.h"
#include "report/json.h"
#include "report/svg.h"
#include "report/text.h"

namespace trainfit {

std::string loader_html(const LoaderReport& r) {
  const LoaderPlan& p = r.plan;
  HtmlPage page("trainfit loader",
                fmt::format("batch {}, step {} ({}), {} usable cores", p.batch,
                            format_duration(p.step_time_s), p.step_time_from, p.usable_cores));
  page.figures(
      {{p.chosen ? "num_workers (chosen)" : "num_workers (given)", std::to_string(p.num_workers)},
       {"Loader", fmt::format("{:.0f} samples/s", p.loader_samples_per_s)},
       {"GPU", fmt::format("{:.0f} samples/s", p.gpu_samples_per_s)},
       {"Bottleneck", p.bottleneck},
       {"Host RAM (PSS)", format_bytes(p.memory.host_ram_bytes)}});
  LineChart c{.id = "loader-throughput",
              .title = "Loader throughput against worker processes",
              .x_label = "num_workers",
              .y_label = "samples/s",
              .x_integer = true};
  Series s{.name = "loader samples/s", .color = 0};
  for (const WorkerPoint& w : p.curve) {
    s.x.push_back(static_cast<double>(w.num_workers));
    s.y.push_back(w.samples_per_s);
    c.hover.push_back({static_cast<double>(w.num_workers),
                       fmt::format("{} workers: {:.1f} samples/s{}", w.num_workers, w.samples_per_s,
                                   w.measured ? " (measured)" : "")});
    if (w.measured) {
      c.marks.push_back({static_cast<double>(w.num_workers),
                         w.samples_per_s,
                         "",
                         "measured",
                         {{"workers", std::to_string(w.num_workers)},
                          {"samples-per-s", fmt::format("{}", w.samples_per_s)}}});
    }
  }
  c.series.push_back(std::move(s));
  c.rules.push_back({p.gpu_samples_per_s,
                     fmt::format("the GPU takes {:.0f} samples/s", p.gpu_samples_per_s),
                     {{"samples-per-s", fmt::format("{}", p.gpu_samples_per_s)}}});
  c.vrules.push_back({static_cast<double>(p.num_workers),
                      fmt::format("num_workers={}", p.num_workers),
                      "workers",
                      {{"workers", std::to_string(p.num_workers)}}});
  page.add(render_line_chart(c));
  page.paragraph(
      "Dots: worker counts the probe measured; the line between them is the model of "
      "the rest.");
  const LoaderMemory& m = p.memory;
  BarChart mem{.id = "host-memory", .title = "Host memory of the loader"};
  mem.bars.push_back({"main process",
                      static_cast<double>(m.main_bytes),
                      "",
                      0,
                      {{"bytes", std::to_string(m.main_bytes)}}});
  const int64_t workers = p.num_workers * (m.worker_own_bytes + m.worker_copy_bytes);
  mem.bars.push_back({fmt::format("{} workers", p.num_workers),
                      static_cast<double>(workers),
                      "",
                      1,
                      {{"bytes", std::to_string(workers)}}});
  mem.bars.push_back({"/dev/shm",
                      static_cast<double>(m.shm_bytes),
                      "",
                      2,
                      {{"bytes", std::to_string(m.shm_bytes)}}});
  mem.bars.push_back({"pinned",
                      static_cast<double>(m.pinned_bytes),
                      "",
                      3,
                      {{"bytes", std::to_string(m.pinned_bytes)}}});
  page.add(render_stacked_bar(mem));
  page.section("The DataLoader");
  page.code(dataloader_call(p));
  if (!p.warnings.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const LoaderWarning& w : p.warnings) rows.push_back({w.code, w.message, w.fix});
    page.table({"warning", "what", "fix"}, rows);
  }
  return page.render(loader_json(r));
}

}  // namespace trainfit
