#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "report/html.h"
#include "report/html_page.h"
#include "report/json.h"
#include "report/svg.h"

namespace trainfit {
namespace {

constexpr size_t kHoverPoints = 1200;

std::string lr_chart(const Schedule& s) {
  const bool per_step = s.interval == StepInterval::kStep;
  const std::string unit = per_step ? "step" : "epoch";
  const int64_t per_epoch = per_step ? s.steps_per_epoch : 1;
  LineChart c{.id = "learning-rate",
              .title = "Learning rate",
              .x_label = unit,
              .y_label = "lr",
              .x_integer = true};
  // A rate that falls by two decades or more reads better on a log scale (when none is 0).
  double lo = s.lrs.front().front(), hi = lo;
  for (const auto& group : s.lrs) {
    for (double v : group) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  c.log_y = lo > 0 && hi / lo >= 100;
  if (c.log_y) c.title += " (log scale)";
  for (size_t g = 0; g < s.lrs.size(); ++g) {
    Series series{.name = s.lrs.size() > 1 ? fmt::format("lr, group {}", g) : "lr",
                  .color = static_cast<int>(g % 8)};
    for (size_t i = 0; i < s.lrs[g].size(); ++i) {
      series.x.push_back(static_cast<double>(i));
      series.y.push_back(s.lrs[g][i]);
    }
    c.series.push_back(std::move(series));
  }
  const std::vector<double>& lr = s.lrs.front();
  c.marks.push_back({0,
                     lr.front(),
                     fmt::format("{:.4g}", lr.front()),
                     "first",
                     {{"step", "0"}, {"lr", fmt::format("{}", lr.front())}}});
  c.marks.push_back(
      {static_cast<double>(lr.size() - 1),
       lr.back(),
       fmt::format("{:.4g}", lr.back()),
       "last",
       {{"step", std::to_string(lr.size() - 1)}, {"lr", fmt::format("{}", lr.back())}}});
  for (const PlateauDrop& d : s.drops) {
    if (d.epoch * per_epoch >= static_cast<int64_t>(lr.size())) continue;  // after the last
    c.vrules.push_back(
        {static_cast<double>(d.epoch * per_epoch),
         "",
         "plateau-drop",
         {{"epoch", std::to_string(d.epoch)}, {"lr", fmt::format("{}", d.lrs.front())}}});
  }
  if (s.stop && s.stop->stopped_epoch) {
    c.vrules.push_back({static_cast<double>(*s.stop->stopped_epoch * per_epoch),
                        fmt::format("stops at epoch {}", *s.stop->stopped_epoch),
                        "stop",
                        {{"epoch", std::to_string(*s.stop->stopped_epoch)}}});
  }
  const size_t step = std::max<size_t>(1, (lr.size() + kHoverPoints - 1) / kHoverPoints);
  for (size_t i = 0; i < lr.size(); i += step) {
    std::string text = fmt::format("{} {}", unit, i);
    if (per_step) text += fmt::format(" (epoch {})", static_cast<int64_t>(i) / per_epoch);
    for (size_t g = 0; g < s.lrs.size(); ++g) {
      text +=
          fmt::format("\nlr{} {:.6g}", s.lrs.size() > 1 ? fmt::format(" {}", g) : "", s.lrs[g][i]);
    }
    c.hover.push_back({static_cast<double>(i), text});
  }
  return render_line_chart(c);
}

std::string metrics_chart(const Schedule& s) {
  LineChart c{.id = "metrics",
              .title = fmt::format("Validation curve: {}", s.metrics->column),
              .x_label = "epoch",
              .y_label = s.metrics->column,
              .y_from_zero = false,
              .x_integer = true};
  Series m{.name = s.metrics->column, .color = 2};
  for (size_t i = 0; i < s.metrics->values.size(); ++i) {
    m.x.push_back(static_cast<double>(i));
    m.y.push_back(s.metrics->values[i]);
    c.hover.push_back(
        {static_cast<double>(i),
         fmt::format("epoch {}\n{} {:.6g}", i, s.metrics->column, s.metrics->values[i])});
  }
  c.series.push_back(std::move(m));
  if (s.stop && s.stop->best_epoch >= 0) {
    c.marks.push_back({static_cast<double>(s.stop->best_epoch),
                       s.stop->best_value,
                       fmt::format("best, epoch {}", s.stop->best_epoch),
                       "best",
                       {{"epoch", std::to_string(s.stop->best_epoch)},
                        {"value", fmt::format("{}", s.stop->best_value)}}});
  }
  if (s.stop && s.stop->stopped_epoch) {
    c.vrules.push_back({static_cast<double>(*s.stop->stopped_epoch),
                        fmt::format("stops at epoch {}", *s.stop->stopped_epoch),
                        "stop",
                        {{"epoch", std::to_string(*s.stop->stopped_epoch)}}});
  }
  return render_line_chart(c);
}

std::string epochs(const std::vector<int64_t>& v) {
  if (v.empty()) return "none";
  return fmt::format("{}", fmt::join(v, ", "));
}

}  // namespace

std::string schedule_html(const Schedule& s) {
  const std::vector<double>& lr = s.lrs.front();
  HtmlPage page("trainfit schedule", fmt::format("{}, stepped after every {}, {} epochs",
                                                 s.scheduler, interval_name(s.interval), s.epochs));
  std::vector<std::pair<std::string, std::string>> figures = {
      {"Values", std::to_string(lr.size())},
      {"First lr", fmt::format("{:.6g}", lr.front())},
      {"Highest", fmt::format("{:.6g}", *std::max_element(lr.begin(), lr.end()))},
      {"Last lr", fmt::format("{:.6g}", lr.back())}};
  if (s.stop) {
    figures.emplace_back("Stops at epoch",
                         s.stop->stopped_epoch ? std::to_string(*s.stop->stopped_epoch) : "never");
    figures.emplace_back("Best epoch", std::to_string(s.stop->best_epoch));
  }
  page.figures(figures);
  for (const std::string& note : s.notes) page.paragraph(note);
  page.add(lr_chart(s));
  if (s.metrics) page.add(metrics_chart(s));
  if (s.plateau) {
    page.section("ReduceLROnPlateau with other patience values");
    std::vector<std::vector<std::string>> rows;
    for (const PlateauReplay& r : s.plateau_sweep) {
      rows.push_back(
          {fmt::format("{}{}", r.patience, r.patience == s.plateau->patience ? " (given)" : ""),
           epochs(r.drop_epochs), fmt::format("{:.6g}", r.final_lr)});
    }
    page.table({"patience", "lowers the rate at epochs", "final lr"}, rows, {true, false, true});
  }
  if (s.stop) {
    page.section("Early stopping with other patience values");
    std::vector<std::vector<std::string>> rows;
    for (const StopReplay& r : s.stop_sweep) {
      rows.push_back({fmt::format("{}{}", r.patience,
                                  r.patience == s.early_stopping->patience ? " (given)" : ""),
                      r.stopped_epoch ? std::to_string(*r.stopped_epoch) : "never",
                      std::to_string(r.best_epoch), fmt::format("{:.6g}", r.best_value)});
    }
    page.table({"patience", "stops at epoch", "best epoch", "best value"}, rows,
               {true, true, true, true});
  }
  return page.render(schedule_json(s));
}

}  // namespace trainfit
