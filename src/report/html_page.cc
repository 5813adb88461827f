#include "report/html_page.h"

#include <fmt/format.h>

#include "report/svg.h"

namespace trainfit {
namespace {

constexpr std::string_view kStyle = R"css(
:root { --ink: #1d2733; --muted: #5b6776; --line: #d5dbe3; --paper: #ffffff; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1040px; padding: 24px 28px 48px; color: var(--ink);
  background: var(--paper); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 22px; margin: 0 0 2px; }
h2 { font-size: 16px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
.subtitle { color: var(--muted); margin: 0 0 16px; }
.figures { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.figure { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.figure .k { color: var(--muted); font-size: 12px; } .figure .v { font-size: 18px; font-weight: 600; }
figure.chart { margin: 8px 0 16px; } figcaption { font-weight: 600; margin-bottom: 4px; }
svg.chart { width: 100%; height: auto; display: block; overflow: visible; }
svg text { font: 11px system-ui, sans-serif; fill: var(--ink); }
.tick, .legend.value { fill: var(--muted); } .label { font-size: 12px; fill: var(--muted); }
.grid { stroke: #eef1f5; } .axis { stroke: #8a96a6; }
.series { fill: none; stroke-width: 1.6; } .dashed { stroke-dasharray: 5 4; }
.rule { stroke: #c0392b; stroke-dasharray: 6 4; } .rule-label { fill: #c0392b; }
.vrule { stroke: #7f3fbf; stroke-dasharray: 3 3; }
.mark circle { fill: #c0392b; stroke: #fff; stroke-width: 1.5; } .mark text { font-weight: 600; }
.cursor { stroke: #444; stroke-dasharray: 2 2; }
.band { opacity: 0.5; } .b0 { fill: #f4f6f8; } .b1 { fill: #e8f1fb; } .b2 { fill: #fdf0e3; } .b3 { fill: #eaf6ec; }
.c0 { stroke: #1f6fbf; fill: #1f6fbf; } .c1 { stroke: #e07b1a; fill: #e07b1a; }
.c2 { stroke: #2e9e5b; fill: #2e9e5b; } .c3 { stroke: #8e44ad; fill: #8e44ad; }
.c4 { stroke: #c0392b; fill: #c0392b; } .c5 { stroke: #16a3a3; fill: #16a3a3; }
.c6 { stroke: #7f8c8d; fill: #7f8c8d; } .c7 { stroke: #b7950b; fill: #b7950b; }
path.series.c0, path.series.c1, path.series.c2, path.series.c3, path.series.c4, path.series.c5,
path.series.c6, path.series.c7 { fill: none; }
rect.bar, rect.segment { stroke: none; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 14px; font-size: 13px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; } td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f4f6f8; padding: 8px 10px; border-radius: 4px; white-space: pre-wrap; word-break: break-all; }
#tip { position: fixed; pointer-events: none; background: #1d2733; color: #fff; padding: 4px 8px;
  border-radius: 4px; font-size: 12px; white-space: pre; display: none; z-index: 9; }
.cellbar { display: inline-block; height: 9px; background: #1f6fbf; vertical-align: middle; margin-right: 6px; }
.cellbar.kept { background: #e07b1a; }
td:has(> .cellbar), td:has(> .shape) { white-space: nowrap; }
footer { margin-top: 32px; color: var(--muted); font-size: 12px; }
@media print { #tip, .cursor { display: none !important; } body { max-width: none; }
  figure.chart, table { break-inside: avoid; } }
)css";

// The hover read-out: each chart with data-hover holds [x, text] pairs in SVG units.
constexpr std::string_view kScript = R"js(
(function () {
  var tip = document.getElementById('tip');
  document.querySelectorAll('svg[data-hover]').forEach(function (svg) {
    var points = JSON.parse(svg.getAttribute('data-hover'));
    var cursor = svg.querySelector('.cursor');
    svg.addEventListener('mousemove', function (e) {
      var p = svg.createSVGPoint(); p.x = e.clientX; p.y = e.clientY;
      var x = p.matrixTransform(svg.getScreenCTM().inverse()).x;
      var lo = 0, hi = points.length - 1;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (points[mid][0] < x) lo = mid + 1; else hi = mid; }
      if (lo > 0 && x - points[lo - 1][0] < points[lo][0] - x) lo -= 1;
      cursor.setAttribute('x1', points[lo][0]); cursor.setAttribute('x2', points[lo][0]);
      cursor.setAttribute('visibility', 'visible');
      tip.textContent = points[lo][1]; tip.style.display = 'block';
      tip.style.left = (e.clientX + 14) + 'px'; tip.style.top = (e.clientY + 12) + 'px';
    });
    svg.addEventListener('mouseleave', function () {
      tip.style.display = 'none'; cursor.setAttribute('visibility', 'hidden');
    });
  });
})();
)js";

}  // namespace

HtmlPage::HtmlPage(std::string title, std::string subtitle)
    : title_(std::move(title)), subtitle_(std::move(subtitle)) {}

void HtmlPage::figures(const std::vector<std::pair<std::string, std::string>>& label_values) {
  body_ += "<div class=\"figures\">";
  for (const auto& [label, value] : label_values) {
    body_ += fmt::format(
        "<div class=\"figure\"><div class=\"k\">{}</div><div class=\"v\">{}</div></div>",
        html_escape(label), html_escape(value));
  }
  body_ += "</div>\n";
}

void HtmlPage::section(std::string_view heading) {
  body_ += fmt::format("<h2>{}</h2>\n", html_escape(heading));
}

void HtmlPage::paragraph(std::string_view text) {
  body_ += fmt::format("<p>{}</p>\n", html_escape(text));
}

void HtmlPage::add(std::string_view html) {
  body_ += html;
}

void HtmlPage::table(const std::vector<std::string>& headers,
                     const std::vector<std::vector<std::string>>& rows,
                     const std::vector<bool>& numeric) {
  std::vector<std::vector<std::string>> escaped;
  for (const auto& row : rows) {
    escaped.emplace_back();
    for (const std::string& cell : row) escaped.back().push_back(html_escape(cell));
  }
  html_table(headers, escaped, numeric);
}

void HtmlPage::html_table(const std::vector<std::string>& headers,
                          const std::vector<std::vector<std::string>>& rows,
                          const std::vector<bool>& numeric) {
  auto cls = [&](size_t i) { return i < numeric.size() && numeric[i] ? " class=\"n\"" : ""; };
  body_ += "<table><thead><tr>";
  for (size_t i = 0; i < headers.size(); ++i) {
    body_ += fmt::format("<th{}>{}</th>", cls(i), html_escape(headers[i]));
  }
  body_ += "</tr></thead><tbody>\n";
  for (const auto& row : rows) {
    body_ += "<tr>";
    for (size_t i = 0; i < row.size(); ++i) {
      body_ += fmt::format("<td{}>{}</td>", cls(i), row[i]);
    }
    body_ += "</tr>\n";
  }
  body_ += "</tbody></table>\n";
}

void HtmlPage::code(std::string_view text) {
  body_ += fmt::format("<pre>{}</pre>\n", html_escape(text));
}

std::string HtmlPage::render(const nlohmann::json& data) const {
  // "</" cannot appear inside a script element; JSON allows "<\/".
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (size_t at = json.find("</"); at != std::string::npos; at = json.find("</", at + 3)) {
    json.replace(at, 2, "<\\/");
  }
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
      "'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
      "<title>{0}</title>\n<style>{1}</style>\n</head>\n<body>\n<h1>{0}</h1>\n"
      "<p class=\"subtitle\">{2}</p>\n{3}<footer>Made by trainfit. The figures are in the JSON "
      "below, as <code>--json</code> prints them.</footer>\n<div id=\"tip\"></div>\n"
      "<script type=\"application/json\" id=\"trainfit-data\">{4}</script>\n<script>{5}</script>\n"
      "</body>\n</html>\n",
      html_escape(title_), kStyle, html_escape(subtitle_), body_, json, kScript);
}

}  // namespace trainfit
