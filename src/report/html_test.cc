// The HTML building blocks: what a page embeds and escapes, and what a chart draws. The reports
// themselves are checked in a browser (tests/python/html_reports_test.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "report/html_page.h"
#include "report/svg.h"

namespace trainfit {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(HtmlPage, EscapesTextAndKeepsTheEmbeddedJsonInsideItsScript) {
  HtmlPage page("<b>model</b>", "a & b");
  page.paragraph("\"quoted\" <tag>");
  page.table({"module"}, {{"</script><script>alert(1)</script>"}});
  const std::string html = page.render({{"model", "</script><script>alert(1)</script>"}});
  // The page's own two script elements close; a name holding "</script>" cannot close one.
  EXPECT_EQ(count(html, "</script>"), 2u);
  EXPECT_NE(html.find("<\\/script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;model&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(html.find("a &amp; b"), std::string::npos);
  EXPECT_NE(html.find("&quot;quoted&quot; &lt;tag&gt;"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);  // nothing to fetch
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST(HtmlPage, InvalidUtf8InTheDataDoesNotThrow) {
  HtmlPage page("t", "s");
  EXPECT_NO_THROW((void)page.render({{"module", std::string("bad \xff\xfe byte")}}));
}

TEST(LineChart, ALongSeriesIsDrawnAsItsEnvelopeWithEveryPeak) {
  LineChart c{.id = "t", .title = "t"};
  Series s{.name = "allocated"};
  for (int i = 0; i < 100000; ++i) {
    s.x.push_back(i);
    s.y.push_back(i == 77777 ? 5000 : i % 100);
  }
  c.series.push_back(s);
  const std::string svg = render_line_chart(c);
  EXPECT_NE(svg.find("data-points=\"100000\""), std::string::npos);
  const size_t d = svg.find(" d=\"M");
  const std::string path = svg.substr(d, svg.find('"', d + 4) - d);
  const size_t drawn = static_cast<size_t>(std::count(path.begin(), path.end(), 'L')) + 1;
  EXPECT_LT(drawn, 5000u);  // about four points per pixel column
  // The one spike is drawn: the highest point drawn (the least SVG y) is 5000, far above the
  // rest (under 100): y = top + height * (1 - 5000 / (5000 * 1.06)), the axis having 6% room.
  double top_y = 1e9;
  std::istringstream points(path.substr(5));
  for (std::string point; std::getline(points, point, 'L');) {
    std::istringstream xy(point);
    double x = 0, y = 0;
    xy >> x >> y;
    top_y = std::min(top_y, y);
  }
  EXPECT_NEAR(top_y, 40 + 252 * (1 - 1 / 1.06), 0.1);
}

TEST(BarChart, EveryBarCarriesItsValue) {
  BarChart c{.id = "b", .title = "b"};
  c.bars.push_back({.label = "layer1", .value = 3, .data = {{"bytes", "3"}}});
  c.bars.push_back({.label = "<fc>", .value = -1});
  c.diverging = true;
  const std::string svg = render_bar_chart(c);
  EXPECT_NE(svg.find("data-label=\"layer1\" data-value=\"3\" data-bytes=\"3\""), std::string::npos);
  EXPECT_NE(svg.find("data-label=\"&lt;fc&gt;\" data-value=\"-1\""), std::string::npos);
  const std::string stacked = render_stacked_bar(c);
  EXPECT_NE(stacked.find("(100.0%)"), std::string::npos);  // the negative one takes no share
}

}  // namespace
}  // namespace trainfit
