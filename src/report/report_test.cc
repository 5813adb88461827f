#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/golden_test_util.h"
#include "base/units.h"
#include "lower/optimizer_step.h"
#include "report/estimate_report.h"
#include "report/json.h"
#include "report/table.h"
#include "report/text.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

TEST(Table, ShrinksFlexibleColumnsToFit) {
  TextTable t({{"Name", Align::kLeft, true}, {"Bytes", Align::kRight, false}});
  t.add_row({std::string(150, 'n'), "1.00 KiB"});
  const std::string text = t.render(40);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 40U) << line;
  EXPECT_NE(text.find(".."), std::string::npos);
}

Summary summary_of(const std::string& model, int64_t batch) {
  ModelRequest r;
  r.name = model;
  r.batch = batch;
  r.options.target = {Device::kCpu, TorchVersion::k1_13};
  const Graph g = *build_model(r);
  r.batch = 1;
  const Graph one = *build_model(r);
  return summarize(g, &one);
}

TEST(SummaryReport, TextGolden) {
  const std::string text = summary_text(summary_of("resnet18", 8), 2);
  expect_golden("summary_resnet18_batch8_depth2.txt", text);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100U) << line;
}

TEST(SummaryReport, JsonGolden) {
  expect_golden("summary_vit_b_32_batch4_depth3.json",
                summary_json(summary_of("vit_b_32", 4), 3).dump(1) + "\n");
}

TEST(EstimateReport, TextGolden) {
  ModelRequest r;
  r.name = "resnet18";
  r.batch = 8;
  const Graph g = *build_model(r);
  EstimateHeader h;
  h.model = "resnet18";
  h.batch = 8;
  h.device = cuda_profile(*find_gpu("rtx4090"));
  h.resolved_impl = resolve_optimizer_impl(h.optimizer.impl, h.device.target);
  EstimateOptions o;
  o.device = h.device;
  o.explain = true;
  const std::string text = estimate_text({h, *estimate(g, o), {}});
  expect_golden("estimate_resnet18_batch8_rtx4090.txt", text);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100U) << line;
}

TEST(SummaryReport, ModuleRowsAddUpToTheTotal) {
  const Summary s = summary_of("vit_b_16", 2);
  int64_t top = 0;
  int64_t params = 0;
  for (const ModuleRow& m : s.modules) {
    if (m.depth == 0) {
      top += m.kept_bytes;
      params += m.parameters;
    }
  }
  EXPECT_EQ(top, s.activation_bytes);
  EXPECT_EQ(params, s.parameters);
}

}  // namespace
}  // namespace trainfit
