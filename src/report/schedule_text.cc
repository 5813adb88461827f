#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "report/json.h"
#include "report/table.h"
#include "report/text.h"

namespace trainfit {
namespace {

constexpr size_t kPlotWidth = 64;   // columns of points
constexpr size_t kPlotHeight = 12;  // rows

std::string lr_text(double lr) {
  return fmt::format("{:.4g}", lr);
}

// The curve as rows of text: every column covers an equal share of the steps and draws the
// span of values in it, so a drop within one column shows as a vertical run. `marks` labels
// columns under the axis (a step index and one character).
std::string plot(const std::vector<double>& v, const std::vector<std::pair<int64_t, char>>& marks,
                 std::string_view x_label) {
  const size_t n = v.size();
  const size_t width = std::min(n, kPlotWidth);
  double lo = *std::min_element(v.begin(), v.end());
  double hi = *std::max_element(v.begin(), v.end());
  // Two decades or more, none of them 0: rows are equal ratios, not equal steps.
  const bool log = lo > 0 && hi / lo >= 100;
  auto row_of = [&](double x) {
    if (hi == lo) return kPlotHeight / 2;
    double share = log ? std::log(x / lo) / std::log(hi / lo) : (x - lo) / (hi - lo);
    return static_cast<size_t>(std::lround(share * (kPlotHeight - 1)));
  };
  auto column_of = [&](size_t i) { return i * width / n; };
  std::vector<std::string> grid(kPlotHeight, std::string(width, ' '));
  for (size_t c = 0; c < width; ++c) {
    size_t first = c * n / width, last = (c + 1) * n / width;
    double bucket_lo = v[first], bucket_hi = v[first];
    for (size_t i = first; i < last && i < n; ++i) {
      bucket_lo = std::min(bucket_lo, v[i]);
      bucket_hi = std::max(bucket_hi, v[i]);
    }
    for (size_t r = row_of(bucket_lo); r <= row_of(bucket_hi); ++r) grid[r][c] = '*';
  }
  std::string top = lr_text(hi), bottom = lr_text(lo);
  size_t label = std::max(top.size(), bottom.size());
  std::string out;
  for (size_t r = kPlotHeight; r-- > 0;) {
    std::string y = r == kPlotHeight - 1 ? top : r == 0 ? bottom : "";
    out += fmt::format("  {:>{}} |{}\n", y, label, grid[r]);
  }
  out += fmt::format("  {:>{}} +{}\n", "", label, std::string(width, '-'));
  std::string under(width, ' ');
  for (const auto& [step, mark] : marks) {
    if (step >= 0 && static_cast<size_t>(step) < n)
      under[column_of(static_cast<size_t>(step))] = mark;
  }
  if (under.find_first_not_of(' ') != std::string::npos) {
    out += fmt::format("  {:>{}}  {}\n", "", label, under);
  }
  std::string last = std::to_string(n - 1);
  std::string axis =
      "0" + std::string(width > last.size() + 1 ? width - last.size() - 1 : 1, ' ') + last;
  out += fmt::format("  {:>{}}  {}  {}{}\n", "", label, axis, x_label,
                     log ? " (lr on a log scale)" : "");
  return out;
}

std::string epochs_list(const std::vector<int64_t>& epochs) {
  if (epochs.empty()) return "none";
  std::vector<std::string> parts;
  for (size_t i = 0; i < epochs.size() && i < 12; ++i) parts.push_back(std::to_string(epochs[i]));
  if (epochs.size() > 12) parts.push_back(fmt::format("... ({} in all)", epochs.size()));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// Indices where the rate rises after having fallen: warm restarts and cycles.
std::vector<int64_t> rises(const std::vector<double>& v) {
  std::vector<int64_t> out;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[i - 1] && (i < 2 || v[i - 1] <= v[i - 2])) out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

std::string group_line(const std::vector<double>& v, std::string_view unit) {
  auto lo = std::min_element(v.begin(), v.end());  // the first lowest
  auto hi = std::max_element(v.begin(), v.end());
  return fmt::format("starts {}, highest {} at {} {}, lowest {} at {} {}, ends {}",
                     lr_text(v.front()), lr_text(*hi), unit, hi - v.begin(), lr_text(*lo), unit,
                     lo - v.begin(), lr_text(v.back()));
}

}  // namespace

std::string schedule_text(const Schedule& s) {
  const bool per_step = s.interval == StepInterval::kStep;
  const std::string_view unit = per_step ? "step" : "epoch";
  std::string out = fmt::format("{}\n", s.scheduler);
  out += fmt::format("  stepped after every {}, {} epochs{}: {} values of lr\n", unit, s.epochs,
                     per_step ? fmt::format(" of {} steps", s.steps_per_epoch) : "",
                     s.lrs.front().size());
  for (const std::string& note : s.notes) out += fmt::format("  note: {}\n", note);
  out += "\n";

  std::vector<std::pair<int64_t, char>> marks;
  int64_t per_epoch = per_step ? s.steps_per_epoch : 1;
  for (const PlateauDrop& d : s.drops) marks.emplace_back(d.epoch * per_epoch, 'v');
  if (s.stop && s.stop->stopped_epoch) marks.emplace_back(*s.stop->stopped_epoch * per_epoch, 'S');
  out += plot(s.lrs.front(), marks, unit);
  out += "\n";
  for (size_t g = 0; g < s.lrs.size(); ++g) {
    out += fmt::format("  lr{}: {}\n", s.lrs.size() > 1 ? fmt::format(" (group {})", g) : "",
                       group_line(s.lrs[g], unit));
  }
  std::vector<int64_t> up = rises(s.lrs.front());
  if (!up.empty() && !s.plateau) out += fmt::format("  rises at {}s {}\n", unit, epochs_list(up));

  if (s.metrics) {
    const std::vector<double>& m = s.metrics->values;
    out += fmt::format("\nValidation curve: {}, {} values, first {}, last {}\n", s.metrics->column,
                       m.size(), lr_text(m.front()), lr_text(m.back()));
  }
  if (s.plateau) {
    out += fmt::format("\nReduceLROnPlateau lowers the rate (v) from epoch{}: ",
                       s.drops.size() == 1 ? "" : "s");
    if (s.drops.empty()) out += "never";
    for (size_t i = 0; i < s.drops.size() && i < 8; ++i) {
      out += fmt::format("{}{} ({})", i ? ", " : "", s.drops[i].epoch,
                         lr_text(s.drops[i].lrs.front()));
    }
    if (s.drops.size() > 8) out += fmt::format(", ... ({} in all)", s.drops.size());
    out += "\n";
    TextTable t({{"patience", Align::kLeft},
                 {"lowers at epochs", Align::kLeft, true},
                 {"final lr", Align::kRight}});
    for (const PlateauReplay& r : s.plateau_sweep) {
      t.add_row({fmt::format("{}{}", r.patience, r.patience == s.plateau->patience ? " *" : ""),
                 epochs_list(r.drop_epochs), lr_text(r.final_lr)});
    }
    out += "\n" + t.render(100);
  }
  if (s.stop) {
    const EarlyStoppingOptions& o = *s.early_stopping;
    out += fmt::format("\nEarly stopping (patience {}, min_delta {}, mode {}): ", o.patience,
                       o.min_delta, o.mode == MetricMode::kMin ? "min" : "max");
    out += s.stop->stopped_epoch ? fmt::format("stops at epoch {} (S)", *s.stop->stopped_epoch)
                                 : std::string("never stops");
    if (s.stop->best_epoch >= 0) {
      out += fmt::format("; best epoch {} ({})", s.stop->best_epoch, lr_text(s.stop->best_value));
    }
    out += "\n";
    TextTable t({{"patience", Align::kLeft},
                 {"stops at", Align::kRight},
                 {"best epoch", Align::kRight},
                 {"best value", Align::kRight}});
    for (const StopReplay& r : s.stop_sweep) {
      t.add_row({fmt::format("{}{}", r.patience, r.patience == o.patience ? " *" : ""),
                 r.stopped_epoch ? std::to_string(*r.stopped_epoch) : "-",
                 std::to_string(r.best_epoch), lr_text(r.best_value)});
    }
    out += "\n" + t.render(100);
  }
  return out;
}

}  // namespace trainfit
