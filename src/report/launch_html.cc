#include <fmt/format.h>

#include "base/units.h"
#include "report/html.h"
#include "report/html_page.h"
#include "report/json.h"
#include "report/svg.h"

namespace trainfit {

std::string launch_html(const LaunchReport& r) {
  const LaunchPlan& p = r.plan;
  HtmlPage page(fmt::format("trainfit launch: {} on {}", r.model, r.gpu),
                fmt::format("the baseline's batch of {} on up to {} GPUs, over {}",
                            p.baseline_batch, r.options.max_gpus, r.link.display));
  BarChart step{.id = "step-time",
                .title = "Step time of each configuration that fits",
                .format = ValueFormat::kSeconds};
  BarChart cost{.id = "gpu-seconds",
                .title = "GPU-seconds per step (what it costs)",
                .format = ValueFormat::kNumber};
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    const LaunchCandidate& c = p.candidates[i];
    std::string label =
        fmt::format("{} GPU{}{}, {} x {}", c.gpus, c.gpus == 1 ? "" : "s",
                    c.gpus == 1 ? "" : fmt::format(" {}", strategy_name(c.strategy)),
                    c.per_gpu_batch, c.grad_accum);
    std::string mark = p.fastest == i ? "fastest" : "";
    if (p.cheapest == i) mark += mark.empty() ? "cheapest" : ", cheapest";
    if (c.fits) {
      std::vector<DataAttr> data = {{"gpus", std::to_string(c.gpus)},
                                    {"strategy", std::string(strategy_name(c.strategy))},
                                    {"step-s", fmt::format("{}", c.step_s)}};
      step.bars.push_back({label, c.step_s, "", p.fastest == i ? 2 : 0, data});
      cost.bars.push_back({label, c.gpu_seconds(), fmt::format("{:.3f}", c.gpu_seconds()),
                           p.cheapest == i ? 2 : 0, data});
    }
    rows.push_back({std::to_string(c.gpus), std::string(strategy_name(c.strategy)),
                    std::to_string(c.per_gpu_batch), std::to_string(c.grad_accum),
                    c.fits ? "yes" : "no", format_bytes(c.estimate.device_used_bytes),
                    format_duration(c.step_s), fmt::format("{:.3f}", c.gpu_seconds()), mark});
  }
  if (!step.bars.empty()) {
    page.add(render_bar_chart(step));
    page.add(render_bar_chart(cost));
  }
  page.table({"GPUs", "strategy", "per GPU", "micro-batches", "fits", "device used", "step",
              "GPU-seconds", ""},
             rows, {true, false, true, true, false, true, true, true, false});
  if (!r.command.empty()) {
    page.section("How to launch it");
    page.code(r.command);
    for (const std::string& e : r.environment) page.paragraph(e);
    for (const std::string& change : r.code_changes) page.code(change);
  }
  return page.render(launch_json(r));
}

}  // namespace trainfit
