// Charts as inline SVG for the HTML reports: a line chart (series, shaded bands, marked points,
// horizontal rules, a hover read-out), horizontal bars, and one stacked bar. Every drawn figure
// carries its exact value in a data-* attribute, so a test can read back what a chart shows.
//
//   LineChart c{.id = "lr", .title = "Learning rate", .x_label = "epoch"};
//   c.series.push_back({.name = "lr", .x = xs, .y = ys});
//   std::string svg = render_line_chart(c);
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace trainfit {

enum class ValueFormat { kBytes, kNumber, kPercent, kSeconds };

// One data-* attribute: {"bytes", "894205440"} renders data-bytes="894205440".
using DataAttr = std::pair<std::string, std::string>;

struct Series {
  std::string name;  // data-series, and the legend
  std::vector<double> x, y;
  int color = 0;  // palette index
  bool dashed = false;
};

struct Band {  // a shaded range of x: a phase
  double x0 = 0, x1 = 0;
  std::string label;
  int color = 0;
};

struct Mark {  // a marked point
  double x = 0, y = 0;
  std::string label;
  std::string kind;  // data-mark
  std::vector<DataAttr> data;
};

struct Rule {  // a horizontal line: a budget
  double y = 0;
  std::string label;
  std::vector<DataAttr> data;
};

struct VRule {  // a vertical line: where training stops
  double x = 0;
  std::string label;
  std::string kind;
  std::vector<DataAttr> data;
};

struct HoverPoint {  // what the read-out says near x
  double x = 0;
  std::string text;
};

struct LineChart {
  std::string id;  // data-chart
  std::string title;
  std::string x_label, y_label;
  ValueFormat x_format = ValueFormat::kNumber;
  ValueFormat y_format = ValueFormat::kNumber;
  bool log_y = false;
  bool y_from_zero = true;
  bool x_integer = false;  // x is a count: ticks at whole numbers
  std::vector<Series> series;
  std::vector<Band> bands;
  std::vector<Mark> marks;
  std::vector<Rule> rules;
  std::vector<VRule> vrules;
  std::vector<HoverPoint> hover;
  // Many series: no legend, and marks and rules name themselves only on hover.
  bool crowded = false;
};

struct Bar {
  std::string label;
  double value = 0;
  std::string text;  // printed beside the bar; empty: the value formatted
  int color = 0;
  std::vector<DataAttr> data;
};

struct BarChart {
  std::string id, title;
  ValueFormat format = ValueFormat::kBytes;
  std::vector<Bar> bars;
  bool diverging = false;  // negative values drawn left of a zero line
};

std::string render_line_chart(const LineChart& chart);
std::string render_bar_chart(const BarChart& chart);
// One bar split into segments, with a legend: what a total is made of.
std::string render_stacked_bar(const BarChart& chart);

std::string format_value(double v, ValueFormat format);
std::string html_escape(std::string_view text);

}  // namespace trainfit
