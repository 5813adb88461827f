// The table of published training throughputs (tests/data/step_time/public_throughputs.json),
// the ground truth of the step-time model: every row must be a request trainfit can build (a
// zoo model, a catalog GPU, a precision it knows, a valid shape) with its source and one
// measured figure, and the model replayed against all of it must stay within the goal: median
// error at most 15% on the rows held out of every choice of constant, and no family (CNN,
// transformer) with a median above 25%. The replay prints each row and the medians per family
// and precision (the table in docs/step-time.md).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "base/enum_names.h"
#include "estimate/gpu_catalog.h"
#include "pipeline/estimator.h"
#include "pipeline/request.h"

namespace trainfit {
namespace {

nlohmann::json load_table() {
  std::ifstream f(std::string(TRAINFIT_TEST_DATA_DIR) + "/step_time/public_throughputs.json");
  return nlohmann::json::parse(f);
}

Result<TrainingRequest> request_of(const nlohmann::json& row) {
  TrainingRequest r;
  r.model = row.at("model");
  r.batch = row.at("batch");
  if (row.contains("seq_len")) r.seq_len = row["seq_len"].get<int64_t>();
  TF_ASSIGN_OR_RETURN(r.precision, parse_enum(kPrecisionNames, "precision",
                                              row.at("precision").get<std::string>()));
  if (row.contains("optimizer")) {
    TF_ASSIGN_OR_RETURN(
        r.optimizer, parse_enum(kOptimizerNames, "optimizer", row["optimizer"].get<std::string>()));
  }
  if (row.contains("optimizer_impl")) {
    TF_ASSIGN_OR_RETURN(r.optimizer_impl, parse_enum(kOptimizerImplNames, "optimizer_impl",
                                                     row["optimizer_impl"].get<std::string>()));
  }
  if (row.contains("memory_format")) {
    TF_ASSIGN_OR_RETURN(r.memory_format, parse_enum(kMemoryFormatNames, "memory_format",
                                                    row["memory_format"].get<std::string>()));
  }
  r.tf32 = row.value("tf32", false);
  TF_ASSIGN_OR_RETURN(const GpuSpec gpu, find_gpu(row.at("gpu").get<std::string>()));
  r.device = cuda_profile(gpu);
  return r;
}

// Seconds per step as published: a step, or forward and backward without the optimizer.
double measured_seconds(const nlohmann::json& row) {
  if (row.contains("step_time_s")) return row["step_time_s"];
  return row.at("batch").get<double>() / row.at("samples_per_s").get<double>();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

TEST(PublicThroughputs, EveryRowIsARequestTrainfitCanBuildWithItsSource) {
  const nlohmann::json table = load_table();
  ASSERT_FALSE(table["rows"].empty());
  int held_out = 0;
  int fitted = 0;
  std::set<std::string> seen;
  for (const nlohmann::json& row : table["rows"]) {
    SCOPED_TRACE(row.dump());
    EXPECT_FALSE(row.at("source").get<std::string>().empty());
    const std::string family = row.at("family");
    EXPECT_TRUE(family == "cnn" || family == "transformer");
    const std::string scope = row.at("scope");
    EXPECT_TRUE(scope == "step" || scope == "fwd_bwd");
    // One measured figure: samples per second or seconds per step.
    EXPECT_NE(row.contains("samples_per_s"), row.contains("step_time_s"));
    EXPECT_GT(measured_seconds(row), 0);
    (row.at("held_out").get<bool>() ? held_out : fitted) += 1;
    const Result<TrainingRequest> r = request_of(row);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const Result<ResolvedRequest> resolved = resolve(*r);
    EXPECT_TRUE(resolved.ok()) << resolved.status().message();
    EXPECT_TRUE(seen.insert(row.dump()).second) << "a row is listed twice";
  }
  // Part of the table stays out of any fitting, and part is there to fit.
  EXPECT_GT(held_out, 0);
  EXPECT_GT(fitted, 0);
}

TEST(PublicThroughputs, StepTimesAreWithinTheGoalOnTheHeldOutRows) {
  const nlohmann::json table = load_table();
  PipelineEstimator estimator;
  std::vector<double> held_out;
  std::map<std::string, std::vector<double>> by_group;  // "family precision" -> |error|
  std::map<std::string, std::vector<double>> by_family;
  std::string report =
      fmt::format("{:<11} {:<10} {:>5} {:<12} {:<8} {:>10} {:>10} {:>7}\n", "model", "gpu", "batch",
                  "precision", "scope", "predicted", "published", "error");
  for (const nlohmann::json& row : table["rows"]) {
    SCOPED_TRACE(row.dump());
    const Result<TrainingRequest> r = request_of(row);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const Result<Estimate> e = estimator.estimate(*r);
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_TRUE(e->time.has_value());
    double predicted = e->time->step_s;
    if (row.at("scope") == "fwd_bwd") predicted -= e->time->part(StepPart::kOptimizer);
    const double measured = measured_seconds(row);
    const double error = (predicted - measured) / measured;
    const bool held = row.at("held_out");
    std::string precision = row.at("precision");
    if (row.value("tf32", false)) precision += "/tf32";
    if (row.value("memory_format", "") == "channels_last") precision += "/cl";
    report += fmt::format("{:<11} {:<10} {:>5} {:<12} {:<8} {:>8.1f}ms {:>8.1f}ms {:>+6.1f}%{}\n",
                          row["model"].get<std::string>(), row["gpu"].get<std::string>(),
                          row["batch"].get<int>(), precision, row["scope"].get<std::string>(),
                          predicted * 1e3, measured * 1e3, 100 * error, held ? "  held out" : "");
    const std::string family = row.at("family");
    const bool amp = row.at("precision") != "fp32";
    by_group[family + (amp ? " amp" : " fp32")].push_back(std::abs(error));
    by_family[family].push_back(std::abs(error));
    if (held) held_out.push_back(std::abs(error));
  }
  for (const auto& [group, errors] : by_group) {
    report +=
        fmt::format("{:<16} rows {:>2}  median {:>5.1f}%  worst {:>5.1f}%\n", group, errors.size(),
                    100 * median(errors), 100 * *std::max_element(errors.begin(), errors.end()));
  }
  report += fmt::format("held out         rows {:>2}  median {:>5.1f}%  worst {:>5.1f}%\n",
                        held_out.size(), 100 * median(held_out),
                        100 * *std::max_element(held_out.begin(), held_out.end()));
  std::cout << report;
  EXPECT_LE(median(held_out), 0.15) << report;
  for (const auto& [family, errors] : by_family) {
    EXPECT_LE(median(errors), 0.25) << family << "\n" << report;
  }
}

}  // namespace
}  // namespace trainfit
