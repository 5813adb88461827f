#include "report/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/units.h"

namespace trainfit {
namespace {

// The line chart's frame, in SVG user units (the SVG scales to the page's width).
constexpr double kWidth = 960, kHeight = 340;
constexpr double kLeft = 84, kRight = 24, kTop = 40, kBottom = 48;
constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;
constexpr size_t kMaxPathPoints = 2400;  // beyond this, a series is drawn as its envelope

std::string attrs(const std::vector<DataAttr>& data) {
  std::string out;
  for (const auto& [key, value] : data)
    out += fmt::format(" data-{}=\"{}\"", key, html_escape(value));
  return out;
}

// 1, 2 or 5 times a power of ten, about `target` ticks over [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || target < 1) return {lo};
  double raw = (hi - lo) / target;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * power;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

// Byte axes tick at round numbers of the unit the largest value is shown in.
double byte_unit(double max) {
  constexpr double kKiB = 1024;
  if (max >= kKiB * kKiB * kKiB) return kKiB * kKiB * kKiB;
  if (max >= kKiB * kKiB) return kKiB * kKiB;
  return max >= kKiB ? kKiB : 1;
}

struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  double from = 0, to = 1;  // pixels
  double operator()(double v) const {
    double a = log ? std::log10(std::max(v, lo)) : v, l = log ? std::log10(lo) : lo,
           h = log ? std::log10(hi) : hi;
    return from + (a - l) / (h - l) * (to - from);
  }
};

std::string fixed(double v) {
  return fmt::format("{:.1f}", v);
}

// Every point, or the first, lowest, highest and last of each pixel column: the drawn shape
// keeps every peak and dip of a long series.
std::vector<std::pair<double, double>> envelope(const Series& s, const Scale& x, const Scale& y) {
  std::vector<std::pair<double, double>> out;
  const size_t n = std::min(s.x.size(), s.y.size());
  if (n <= kMaxPathPoints) {
    for (size_t i = 0; i < n; ++i) out.emplace_back(x(s.x[i]), y(s.y[i]));
    return out;
  }
  size_t i = 0;
  while (i < n) {
    double column = std::floor(x(s.x[i]));
    size_t first = i, lo = i, hi = i;
    while (i < n && std::floor(x(s.x[i])) == column) {
      if (s.y[i] < s.y[lo]) lo = i;
      if (s.y[i] > s.y[hi]) hi = i;
      ++i;
    }
    std::vector<size_t> keep = {first, lo, hi, i - 1};
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (size_t k : keep) out.emplace_back(x(s.x[k]), y(s.y[k]));
  }
  return out;
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_value(double v, ValueFormat format) {
  switch (format) {
    case ValueFormat::kBytes:
      return format_bytes(static_cast<int64_t>(v));
    case ValueFormat::kPercent:
      return fmt::format("{:.1f}%", v * 100);
    case ValueFormat::kSeconds:
      return format_duration(v);
    case ValueFormat::kNumber:
      return fmt::format("{:.4g}", v);
  }
  return "";
}

std::string render_line_chart(const LineChart& c) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  auto see_x = [&](double v) { x_lo = std::min(x_lo, v), x_hi = std::max(x_hi, v); };
  auto see_y = [&](double v) {
    if (c.log_y && !(v > 0)) return;
    y_lo = std::min(y_lo, v), y_hi = std::max(y_hi, v);
  };
  for (const Series& s : c.series) {
    for (double v : s.x) see_x(v);
    for (double v : s.y) see_y(v);
  }
  for (const Mark& m : c.marks) see_x(m.x), see_y(m.y);
  for (const Rule& r : c.rules) see_y(r.y);
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1;
  if (!std::isfinite(y_lo)) y_lo = 0, y_hi = 1;
  if (x_hi == x_lo) x_hi = x_lo + 1;
  if (c.y_from_zero && !c.log_y) y_lo = std::min(0.0, y_lo);
  if (c.log_y) {
    y_lo = std::pow(10.0, std::floor(std::log10(y_lo)));
    y_hi = std::pow(10.0, std::ceil(std::log10(y_hi)));
    if (y_hi == y_lo) y_hi = y_lo * 10;
  } else {
    if (y_hi == y_lo) y_hi = y_lo + (y_lo == 0 ? 1 : std::fabs(y_lo));
    y_hi += (y_hi - y_lo) * 0.06;
  }
  Scale x{x_lo, x_hi, false, kLeft, kLeft + kPlotWidth};
  Scale y{y_lo, y_hi, c.log_y, kTop + kPlotHeight, kTop};

  nlohmann::json hover = nlohmann::json::array();
  for (const HoverPoint& h : c.hover) hover.push_back({std::round(x(h.x) * 10) / 10, h.text});
  std::string out = fmt::format(
      "<figure class=\"chart\"><figcaption>{}</figcaption>\n"
      "<svg class=\"chart\" data-chart=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" "
      "aria-label=\"{}\"{}>\n",
      html_escape(c.title), c.id, kWidth, kHeight, html_escape(c.title),
      c.hover.empty() ? "" : fmt::format(" data-hover=\"{}\"", html_escape(hover.dump())));
  for (const Band& b : c.bands) {
    out += fmt::format(
        "<rect class=\"band b{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}</title>"
        "</rect>\n",
        b.color, fixed(x(b.x0)), kTop, fixed(std::max(0.5, x(b.x1) - x(b.x0))), kPlotHeight,
        html_escape(b.label));
  }
  // Axes and ticks.
  double unit = c.y_format == ValueFormat::kBytes ? byte_unit(y_hi) : 1;
  std::vector<double> y_ticks;
  if (c.log_y) {
    for (double t = y_lo; t <= y_hi * 1.0001; t *= 10) y_ticks.push_back(t);
  } else {
    for (double t : nice_ticks(y_lo / unit, y_hi / unit, 5)) y_ticks.push_back(t * unit);
  }
  for (double t : y_ticks) {
    std::string label = c.y_format == ValueFormat::kBytes ? fmt::format("{:g} {}", t / unit,
                                                                        unit >= 1073741824 ? "GiB"
                                                                        : unit >= 1048576  ? "MiB"
                                                                        : unit >= 1024     ? "KiB"
                                                                                           : "B")
                                                          : format_value(t, c.y_format);
    out += fmt::format(
        "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/><text class=\"tick\" "
        "x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
        kLeft, kLeft + kPlotWidth, fixed(y(t)), fixed(y(t)), kLeft - 6, fixed(y(t) + 4),
        html_escape(label));
  }
  for (double t :
       nice_ticks(x_lo, x_hi, c.x_integer ? std::min(8, static_cast<int>(x_hi - x_lo)) : 8)) {
    out +=
        fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                    fixed(x(t)), kTop + kPlotHeight + 16, html_escape(format_value(t, c.x_format)));
  }
  out += fmt::format(
      "<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/><line class=\"axis\" "
      "x1=\"{0}\" x2=\"{3}\" y1=\"{2}\" y2=\"{2}\"/>\n",
      kLeft, kTop, kTop + kPlotHeight, kLeft + kPlotWidth);
  out += fmt::format(
      "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n<text "
      "class=\"label\" transform=\"translate(16 {}) rotate(-90)\" "
      "text-anchor=\"middle\">{}</text>\n",
      kLeft + kPlotWidth / 2, kHeight - 8, html_escape(c.x_label), kTop + kPlotHeight / 2,
      html_escape(c.y_label));
  for (const Rule& r : c.rules) {
    out += fmt::format(
        "<line class=\"rule\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"{}><title>{}</title></line>\n",
        kLeft, kLeft + kPlotWidth, fixed(y(r.y)), fixed(y(r.y)), attrs(r.data),
        html_escape(r.label));
    if (!c.crowded) {
      out += fmt::format(
          "<text class=\"rule-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
          kLeft + kPlotWidth - 4, fixed(y(r.y) - 5), html_escape(r.label));
    }
  }
  for (const VRule& r : c.vrules) {
    out += fmt::format(
        "<line class=\"vrule\" data-mark=\"{}\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"{}/><text "
        "class=\"rule-label\" x=\"{}\" y=\"{}\">{}</text>\n",
        r.kind, fixed(x(r.x)), fixed(x(r.x)), kTop, kTop + kPlotHeight, attrs(r.data),
        fixed(x(r.x) + 4), kTop + 12, html_escape(r.label));
  }
  // Series, then the legend.
  for (const Series& s : c.series) {
    std::string d;
    for (const auto& [px, py] : envelope(s, x, y)) {
      d += fmt::format("{}{} {}", d.empty() ? "M" : " L", fixed(px), fixed(py));
    }
    out += fmt::format(
        "<path class=\"series c{}{}\" data-series=\"{}\" data-points=\"{}\" d=\"{}\"/>\n", s.color,
        s.dashed ? " dashed" : "", html_escape(s.name), std::min(s.x.size(), s.y.size()), d);
  }
  double legend_x = kLeft + 8;
  for (const Series& s : c.crowded ? std::vector<Series>{} : c.series) {
    out += fmt::format(
        "<rect class=\"swatch c{}\" x=\"{}\" y=\"{}\" width=\"14\" height=\"4\"/><text "
        "class=\"legend\" x=\"{}\" y=\"{}\">{}</text>\n",
        s.color, fixed(legend_x), kTop - 18, fixed(legend_x + 18), kTop - 13, html_escape(s.name));
    legend_x += 30 + 7.0 * static_cast<double>(s.name.size());
  }
  for (const Mark& m : c.marks) {
    out += fmt::format(
        "<g class=\"mark\" data-mark=\"{}\"{}><circle cx=\"{}\" cy=\"{}\" r=\"{}\"/><text x=\"{}\" "
        "y=\"{}\" text-anchor=\"{}\">{}</text><title>{}</title></g>\n",
        m.kind, attrs(m.data), fixed(x(m.x)), fixed(y(m.y)), c.crowded ? 3.5 : 5,
        fixed(x(m.x) + (x(m.x) > kWidth * 0.7 ? -8 : 8)), fixed(std::max(kTop + 10, y(m.y) - 8)),
        x(m.x) > kWidth * 0.7 ? "end" : "start", c.crowded ? "" : html_escape(m.label),
        html_escape(m.label));
  }
  if (!c.hover.empty()) {
    out += fmt::format(
        "<line class=\"cursor\" x1=\"0\" x2=\"0\" y1=\"{}\" y2=\"{}\" visibility=\"hidden\"/>\n",
        kTop, kTop + kPlotHeight);
  }
  return out + "</svg></figure>\n";
}

std::string render_bar_chart(const BarChart& c) {
  constexpr double kRow = 24, kLabel = 260, kBarWidth = 520;
  double max = 0;
  for (const Bar& b : c.bars) max = std::max(max, std::fabs(b.value));
  if (max == 0) max = 1;
  const double zero = c.diverging ? kLabel + kBarWidth / 2 : kLabel;
  const double span = c.diverging ? kBarWidth / 2 : kBarWidth;
  const double height = kRow * static_cast<double>(c.bars.size()) + 12;
  std::string out = fmt::format(
      "<figure class=\"chart\"><figcaption>{}</figcaption>\n<svg class=\"chart bars\" "
      "data-chart=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\n",
      html_escape(c.title), c.id, kWidth, height, html_escape(c.title));
  for (size_t i = 0; i < c.bars.size(); ++i) {
    const Bar& b = c.bars[i];
    double top = 6 + kRow * static_cast<double>(i);
    double w = std::fabs(b.value) / max * span;
    double left = b.value < 0 ? zero - w : zero;
    std::string text = b.text.empty() ? format_value(b.value, c.format) : b.text;
    out += fmt::format(
        "<text class=\"bar-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><rect "
        "class=\"bar c{}\" data-label=\"{}\" data-value=\"{}\"{} x=\"{}\" y=\"{}\" width=\"{}\" "
        "height=\"{}\"><title>{}: {}</title></rect><text class=\"bar-value\" x=\"{}\" "
        "y=\"{}\">{}</text>\n",
        kLabel - 8, fixed(top + 15), html_escape(b.label), b.color, html_escape(b.label),
        fmt::format("{}", b.value), attrs(b.data), fixed(left), fixed(top + 3),
        fixed(std::max(w, 0.5)), kRow - 6, html_escape(b.label), html_escape(text),
        fixed((c.diverging ? kLabel + kBarWidth : left + w) + 6), fixed(top + 15),
        html_escape(text));
  }
  if (c.diverging) {
    out += fmt::format("<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"2\" y2=\"{1}\"/>\n", zero,
                       height - 2);
  }
  return out + "</svg></figure>\n";
}

std::string render_stacked_bar(const BarChart& c) {
  constexpr double kBarTop = 8, kBarHeight = 34, kRow = 20;
  double total = 0;
  for (const Bar& b : c.bars) total += std::max(0.0, b.value);
  if (total == 0) total = 1;
  const double height = kBarTop + kBarHeight + 14 + kRow * static_cast<double>(c.bars.size());
  std::string out = fmt::format(
      "<figure class=\"chart\"><figcaption>{}</figcaption>\n<svg class=\"chart stacked\" "
      "data-chart=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\n",
      html_escape(c.title), c.id, kWidth, height, html_escape(c.title));
  double left = kLeft;
  const double width = kWidth - kLeft - kRight;
  for (size_t i = 0; i < c.bars.size(); ++i) {
    const Bar& b = c.bars[i];
    double w = std::max(0.0, b.value) / total * width;
    std::string text = b.text.empty() ? format_value(b.value, c.format) : b.text;
    out += fmt::format(
        "<rect class=\"segment c{}\" data-label=\"{}\" data-value=\"{}\"{} x=\"{}\" y=\"{}\" "
        "width=\"{}\" height=\"{}\"><title>{}: {}</title></rect>\n",
        b.color, html_escape(b.label), fmt::format("{}", b.value), attrs(b.data), fixed(left),
        kBarTop, fixed(w), kBarHeight, html_escape(b.label), html_escape(text));
    double row = kBarTop + kBarHeight + 14 + kRow * static_cast<double>(i);
    out += fmt::format(
        "<rect class=\"swatch c{}\" x=\"{}\" y=\"{}\" width=\"12\" height=\"12\"/><text "
        "class=\"legend\" x=\"{}\" y=\"{}\">{}</text><text class=\"legend value\" x=\"{}\" "
        "y=\"{}\" text-anchor=\"end\">{} ({:.1f}%)</text>\n",
        b.color, kLeft, fixed(row), kLeft + 18, fixed(row + 10), html_escape(b.label), kLeft + 520,
        fixed(row + 10), html_escape(text), std::max(0.0, b.value) / total * 100);
    left += w;
  }
  return out + "</svg></figure>\n";
}

}  // namespace trainfit
