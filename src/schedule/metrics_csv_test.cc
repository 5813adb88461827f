#include "schedule/metrics_csv.h"

#include <gtest/gtest.h>

#include <random>

namespace trainfit {
namespace {

TEST(MetricsCsv, ReadsTheLoggersFormats) {
  // Lightning's CSVLogger: train and validation rows apart, blanks where a row has no value.
  Result<MetricsCurve> lightning = parse_metrics_csv(
      "epoch,step,train_loss,val_loss\r\n0,9,1.5,\r\n0,9,,1.25\r\n1,19,1.0,\r\n1,19,,0.75\r\n",
      "metrics.csv", "");
  ASSERT_TRUE(lightning.ok()) << lightning.status().to_string();
  EXPECT_EQ(lightning->column, "val_loss");
  EXPECT_EQ(lightning->values, (std::vector<double>{1.25, 0.75}));
  EXPECT_EQ(lightning->lines, (std::vector<int64_t>{3, 5}));
  // TensorBoard's export: the value beside wall time and step.
  Result<MetricsCurve> tb = parse_metrics_csv(
      "Wall time,Step,Value\n1700000000.5,100,0.9\n1700000010.5,200,0.8\n", "run.csv", "");
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(tb->column, "Value");
  EXPECT_EQ(tb->values, (std::vector<double>{0.9, 0.8}));
  // No header, one column; comments skipped; quoted header.
  Result<MetricsCurve> plain = parse_metrics_csv("# val loss\n0.5\n0.25\n", "v.csv", "");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->column, "column 1");
  EXPECT_EQ(plain->values.size(), 2u);
  Result<MetricsCurve> named =
      parse_metrics_csv("\"val acc\",val_loss\n0.5,1\n", "v.csv", "val acc");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->values, (std::vector<double>{0.5}));
}

TEST(MetricsCsv, ChoosesTheValidationColumnAmongSeveral) {
  Result<MetricsCurve> c = parse_metrics_csv("train_loss,val_loss,lr\n1,2,0.1\n", "m.csv", "");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->column, "val_loss");
  Result<MetricsCurve> two = parse_metrics_csv("val_loss,val_acc\n1,0.5\n", "m.csv", "");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().hint().find("--column"), std::string::npos);
}

TEST(MetricsCsv, RefusesWhatIsNotACurve) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "has no rows"},
      {"\n\n", "has no rows"},
      {"epoch,step\n0,1\n", "no numeric column"},
      {"val_loss\n0.5\nNaN\n", "is NaN"},
      {"val_loss\n0.5\ninf\n", "is inf"},
      {"val_loss\n0.5\nabc\n", "'abc' is not a number"},
      {"val_loss\n", "no numeric column"},
      {"a,val_loss\n1,2\n3\n", "1 fields where the header has 2"},
      {std::string("val_loss\n0.5\0\n", 14), "NUL"},
  };
  for (const auto& [text, message] : cases) {
    Result<MetricsCurve> c = parse_metrics_csv(text, "m.csv", "");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(message), std::string::npos)
        << ::testing::PrintToString(text) << ": " << c.status().message();
  }
  EXPECT_FALSE(parse_metrics_csv("val_loss\n1\n", "m.csv", "val_los").ok());
}

TEST(MetricsCsv, SurvivesTruncatedAndRandomInput) {
  const std::string valid = "epoch,step,train_loss,val_loss\n0,9,1.5,\n0,9,,1.25\n1,19,\"1.0\",\n";
  for (size_t n = 0; n <= valid.size(); ++n) (void)parse_metrics_csv(valid.substr(0, n), "m", "");
  std::mt19937 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string text = valid;
    for (int k = 0; k < 3; ++k) text[rng() % text.size()] = static_cast<char>(rng() % 256);
    (void)parse_metrics_csv(text, "m", "");
  }
}

}  // namespace
}  // namespace trainfit
