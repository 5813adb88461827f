#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "base/units.h"
#include "pipeline/request_options.h"
#include "report/format.h"
#include "report/html.h"
#include "report/html_page.h"
#include "report/json.h"
#include "report/svg.h"

namespace trainfit {
namespace {

struct CardCurve {
  std::string name;
  const BatchFit* fit;
  const std::vector<BatchPoint>* curve;
};

// Device used against batch for each card, its budget as a line and its largest batch marked.
std::string curve_chart(const std::vector<CardCurve>& cards) {
  LineChart c{.id = "memory-vs-batch",
              .title = "Device used (as nvidia-smi shows it) against batch size",
              .x_label = "batch",
              .y_label = "device used",
              .y_format = ValueFormat::kBytes,
              .x_integer = true};
  std::map<int64_t, std::vector<std::string>> budgets;
  int color = 0;
  for (const CardCurve& card : cards) {
    Series s{.name = card.name, .color = color++ % 8};
    for (const BatchPoint& p : *card.curve) {
      s.x.push_back(static_cast<double>(p.batch));
      s.y.push_back(static_cast<double>(p.device_used_bytes));
      c.hover.push_back(
          {static_cast<double>(p.batch),
           fmt::format("{}: batch {}\ndevice used {}\nreserved {} · allocated {}", card.name,
                       p.batch, format_bytes(p.device_used_bytes),
                       format_bytes(p.peak_reserved_bytes), format_bytes(p.peak_allocated_bytes))});
    }
    c.series.push_back(std::move(s));
    budgets[card.fit->budget_bytes].push_back(card.name);
    if (card.fit->max_batch > 0) {
      c.marks.push_back({static_cast<double>(card.fit->max_batch),
                         static_cast<double>(card.fit->device_used_bytes),
                         fmt::format("{}: batch {}", card.name, card.fit->max_batch),
                         "max-batch",
                         {{"gpu", card.name},
                          {"batch", std::to_string(card.fit->max_batch)},
                          {"bytes", std::to_string(card.fit->device_used_bytes)}}});
    }
  }
  c.crowded = cards.size() > 3;
  std::sort(c.hover.begin(), c.hover.end(),
            [](const HoverPoint& a, const HoverPoint& b) { return a.x < b.x; });
  for (const auto& [budget, names] : budgets) {
    c.rules.push_back({static_cast<double>(budget),
                       fmt::format("budget {} ({})", format_bytes(budget), fmt::join(names, ", ")),
                       {{"bytes", std::to_string(budget)}}});
  }
  return render_line_chart(c);
}

std::string change_text(const std::optional<double>& change) {
  return change ? fmt::format("{:+.1f}%", *change * 100) : "-";
}

void what_if_section(HtmlPage& page, const WhatIfReport& w) {
  page.section(fmt::format("What each knob does at batch {}", w.batch));
  const int64_t base = w.what_if.base.device_used_bytes;
  BarChart saves{.id = "what-if-memory",
                 .title = fmt::format("Device used saved against {} as given", format_bytes(base)),
                 .diverging = true};
  BarChart times{.id = "what-if-time",
                 .title = "Step time change",
                 .format = ValueFormat::kPercent,
                 .diverging = true};
  std::vector<std::vector<std::string>> rows;
  for (const WhatIfRow& r : w.what_if.rows) {
    const int64_t saved = base - r.estimate.device_used_bytes;
    saves.bars.push_back(
        {r.knob.name,
         static_cast<double>(saved),
         fmt::format("{}{}", saved < 0 ? "-" : "", format_bytes(std::abs(saved))),
         saved >= 0 ? 2 : 4,
         {{"knob", r.knob.name}, {"bytes", std::to_string(r.estimate.device_used_bytes)}}});
    if (r.step_change) {
      times.bars.push_back(
          {r.knob.name, *r.step_change, "", *r.step_change <= 0 ? 2 : 4, {{"knob", r.knob.name}}});
    }
    rows.push_back({r.knob.name, format_bytes(r.estimate.device_used_bytes),
                    std::to_string(r.fit.max_batch), r.knob.cost, change_text(r.step_change),
                    command_line(request_args(r.request))});
  }
  page.add(render_bar_chart(saves));
  if (!times.bars.empty()) page.add(render_bar_chart(times));
  page.table({"knob", "device used", "largest batch", "cost", "step time", "estimate with it"},
             rows, {false, true, true, false, true, false});
  for (const auto& [name, why] : w.what_if.skipped) {
    page.paragraph(fmt::format("{}: {}", name, why));
  }
}

void target_section(HtmlPage& page, const TargetPlan& p, int64_t budget) {
  page.section(fmt::format("Reaching batch {}", p.target));
  BarChart bars{.id = "target",
                .title = fmt::format("Device used against the budget of {}", format_bytes(budget))};
  bars.bars.push_back({"as given",
                       static_cast<double>(p.as_given.device_used_bytes),
                       "",
                       p.as_given.device_used_bytes > budget ? 4 : 2,
                       {{"bytes", std::to_string(p.as_given.device_used_bytes)}}});
  std::vector<std::string> names;
  for (const Knob& k : p.knobs) names.push_back(k.name);
  std::string plan = p.fits
                         ? (names.empty() ? "as given" : fmt::format("{}", fmt::join(names, " + ")))
                         : fmt::format("micro-batch {} x {} steps", p.micro_batch, p.accumulation);
  if (p.fits || p.accumulation_estimated) {
    bars.bars.push_back({plan,
                         static_cast<double>(p.estimate.device_used_bytes),
                         "",
                         p.estimate.device_used_bytes > budget ? 4 : 2,
                         {{"bytes", std::to_string(p.estimate.device_used_bytes)}}});
  }
  bars.bars.push_back(
      {"budget", static_cast<double>(budget), "", 6, {{"bytes", std::to_string(budget)}}});
  page.add(render_bar_chart(bars));
  if (p.fits) {
    page.paragraph(names.empty() ? "Fits as given."
                                 : fmt::format("Fits with {} ({} estimates tried).", plan,
                                               p.combinations_tried));
  } else if (p.micro_batch > 0 && !p.accumulation_estimated) {
    page.paragraph("No combination of the allowed knobs fits it; " + unplanned_accumulation(p));
  } else if (p.micro_batch > 0) {
    page.paragraph(
        fmt::format("No combination of the allowed knobs fits it; gradient accumulation "
                    "does: micro-batch {} x {} steps = effective batch {}.",
                    p.micro_batch, p.accumulation, p.effective_batch));
  } else {
    page.paragraph("Not even batch 1 fits with gradient accumulation.");
  }
  if (p.estimate.time) {
    page.paragraph(
        fmt::format("Step {} ({:.0f} samples/s), {} time per sample against batch {} "
                    "as given.",
                    format_duration(p.estimate.time->step_s), p.estimate.time->samples_per_s,
                    change_text(p.step_change), p.target));
  }
  page.code(command_line(request_args(p.request)));
}

}  // namespace

std::string fit_html(const FitReport& r) {
  const nlohmann::json j = fit_json(r);
  const EstimateHeader& h = r.header;
  if (!r.gpus.empty()) {
    HtmlPage page(fmt::format("trainfit fit: {} on every GPU", model_title(h)),
                  fmt::format("{}, {}, margin {:.0f}%", precision_label(h), optimizer_line(h),
                              r.margin * 100));
    BarChart bars{
        .id = "max-batch", .title = "Largest batch that fits", .format = ValueFormat::kNumber};
    std::vector<CardCurve> cards;
    for (const GpuFit& g : r.gpus) {
      bars.bars.push_back(
          {std::string(g.gpu.display),
           static_cast<double>(g.fit.max_batch),
           g.fit.at_search_limit ? fmt::format("at least {}", g.fit.max_batch) : "",
           0,
           {{"gpu", std::string(g.gpu.name)}, {"max-batch", std::to_string(g.fit.max_batch)}}});
      if (!g.curve.empty()) cards.push_back({std::string(g.gpu.name), &g.fit, &g.curve});
    }
    page.add(render_bar_chart(bars));
    if (!cards.empty()) page.add(curve_chart(cards));
    for (const GpuFit& g : r.gpus) {
      if (g.fit.central_max_batch == g.fit.max_batch) continue;
      page.paragraph(fmt::format(
          "{}: decided by the bound on cuDNN workspaces no recording measured; the central "
          "figure alone would allow batch {}.",
          g.gpu.display, g.fit.central_max_batch));
    }
    return page.render(j);
  }
  HtmlPage page(fmt::format("trainfit fit: {} on {}", model_title(h), r.device.gpu_display),
                fmt::format("{}, {}, margin {:.0f}% of {}", precision_label(h), optimizer_line(h),
                            r.margin * 100, format_bytes(r.device.total_bytes)));
  page.figures({{"Largest batch",
                 fmt::format("{}{}", r.fit.at_search_limit ? "at least " : "", r.fit.max_batch)},
                {"Device used at it", format_bytes(r.fit.device_used_bytes)},
                {"Budget", format_bytes(r.fit.budget_bytes)},
                {"One more needs", next_batch_needs(r.fit, r.device.total_bytes)}});
  if (r.fit.device_used_upper_bytes > r.fit.device_used_bytes ||
      r.fit.central_max_batch != r.fit.max_batch) {
    page.paragraph(fmt::format(
        "Decided by the bound: with the cuDNN workspaces no recording measured at their upper "
        "bound, device used at batch {} is up to {}; the central figure alone would allow batch "
        "{}.",
        r.fit.max_batch, format_bytes(r.fit.device_used_upper_bytes), r.fit.central_max_batch));
  }
  if (!r.curve.empty()) {
    page.add(curve_chart({{r.device.gpu.empty() ? "this GPU" : r.device.gpu, &r.fit, &r.curve}}));
  }
  if (r.what_if) what_if_section(page, *r.what_if);
  if (r.target) target_section(page, *r.target, r.fit.budget_bytes);
  return page.render(j);
}

}  // namespace trainfit
