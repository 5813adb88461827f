// The table of published training throughputs (tests/data/step_time/public_throughputs.json),
// the ground truth of the step-time model: every row must be a request trainfit can build (a
// zoo model, a catalog GPU, a precision it knows, a valid shape) with its source and one
// measured figure, so that the model can be replayed against all of it.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "base/enum_names.h"
#include "estimate/gpu_catalog.h"
#include "pipeline/request.h"

namespace trainfit {
namespace {

nlohmann::json load_table() {
  std::ifstream f(std::string(TRAINFIT_TEST_DATA_DIR) + "/step_time/public_throughputs.json");
  return nlohmann::json::parse(f);
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
    const std::string scope = row.at("scope");
    EXPECT_TRUE(scope == "step" || scope == "fwd_bwd");
    if (row.contains("memory_format")) {
      const std::string format = row["memory_format"];
      EXPECT_TRUE(format == "channels_first" || format == "channels_last");
    }
    // One measured figure: samples per second or seconds per step.
    EXPECT_NE(row.contains("samples_per_s"), row.contains("step_time_s"));
    const double figure = row.value("samples_per_s", row.value("step_time_s", 0.0));
    EXPECT_GT(figure, 0);
    (row.at("held_out").get<bool>() ? held_out : fitted) += 1;

    TrainingRequest r;
    r.model = row.at("model");
    r.batch = row.at("batch");
    if (row.contains("seq_len")) r.seq_len = row["seq_len"].get<int64_t>();
    const Result<Precision> precision =
        parse_enum(kPrecisionNames, "precision", row.at("precision").get<std::string>());
    ASSERT_TRUE(precision.ok()) << precision.status().message();
    r.precision = *precision;
    const Result<GpuSpec> gpu = find_gpu(row.at("gpu").get<std::string>());
    ASSERT_TRUE(gpu.ok()) << gpu.status().message();
    r.device = cuda_profile(*gpu);
    const Result<ResolvedRequest> resolved = resolve(r);
    EXPECT_TRUE(resolved.ok()) << resolved.status().message();
    EXPECT_TRUE(seen.insert(row.dump()).second) << "a row is listed twice";
  }
  // Part of the table stays out of any fitting, and part is there to fit.
  EXPECT_GT(held_out, 0);
  EXPECT_GT(fitted, 0);
}

}  // namespace
}  // namespace trainfit
