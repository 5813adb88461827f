// One self-contained HTML report: inline CSS, inline SVG charts, a few lines of JavaScript for
// the charts' hover read-out, and the report's JSON (exactly what --json prints) in a
// <script type="application/json" id="trainfit-data"> block. Nothing is fetched: no fonts,
// scripts or images from elsewhere. Prints on paper without the hover.
//
//   HtmlPage page("trainfit estimate", "resnet50, batch 64, on an RTX 4090");
//   page.figures({{"Peak allocated", "5.1 GiB"}});
//   page.section("Memory over two iterations");
//   page.add(render_line_chart(chart));
//   std::string html = page.render(estimate_json(report));
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace trainfit {

class HtmlPage {
 public:
  HtmlPage(std::string title, std::string subtitle);
  // The headline figures, in a row of boxes.
  void figures(const std::vector<std::pair<std::string, std::string>>& label_values);
  void section(std::string_view heading);
  void paragraph(std::string_view text);
  void add(std::string_view html);  // a chart, already HTML
  // `numeric` right-aligns a column; cells are text, escaped here.
  void table(const std::vector<std::string>& headers,
             const std::vector<std::vector<std::string>>& rows,
             const std::vector<bool>& numeric = {});
  // The same with cells that are already HTML (a cell with a bar in it).
  void html_table(const std::vector<std::string>& headers,
                  const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& numeric = {});
  void code(std::string_view text);  // a command or Python line, preformatted
  std::string render(const nlohmann::json& data) const;

 private:
  std::string title_, subtitle_;
  std::string body_;
};

}  // namespace trainfit
