// `trainfit loader` on the recorded profile (tests/data/loader/decode.json): the JSON keys
// DESIGN.md promises, a model's predicted step time, and one line for every bad input.
#include <gtest/gtest.h>

#include "cli/cli_test_util.h"

namespace trainfit {
namespace {

std::string profile() {
  return std::string(TRAINFIT_TEST_DATA_DIR) + "/loader/decode.json";
}

TEST(LoaderCli, JsonHasTheKeysOfTheContract) {
  const nlohmann::json j =
      run_json({"loader", "--profile", profile(), "--step-time", "80ms", "--batch", "32"});
  for (const char* key : {"num_workers", "prefetch_factor", "pin_memory", "persistent_workers",
                          "loader_samples_per_s", "gpu_samples_per_s", "bottleneck",
                          "host_ram_bytes", "shm_bytes", "pinned_bytes", "warnings"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_DOUBLE_EQ(j["gpu_samples_per_s"].get<double>(), 32 / 0.080);
  EXPECT_TRUE(j["bottleneck"] == "loader" || j["bottleneck"] == "gpu");
  EXPECT_TRUE(j["warnings"].is_array());
  EXPECT_GT(j["host_ram_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["step_time_from"], "given");
  EXPECT_NE(j["dataloader"].get<std::string>().find("DataLoader(dataset, batch_size=32"),
            std::string::npos);
}

TEST(LoaderCli, TextShowsTheSettingsToPaste) {
  const CliRun r = run({"loader", "--profile", profile(), "--step-time", "0.2s", "--batch", "32"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Use          DataLoader(dataset, batch_size=32"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("<- chosen"), std::string::npos);
  EXPECT_NE(r.out.find("Host RAM"), std::string::npos);
}

TEST(LoaderCli, TheGpuRateFromAModelsPredictedStep) {
  const nlohmann::json estimate =
      run_json({"estimate", "--model", "resnet50", "--batch", "32", "--gpu", "rtx4090"});
  const nlohmann::json plan = run_json({"loader", "--profile", profile(), "--model", "resnet50",
                                        "--batch", "32", "--gpu", "rtx4090"});
  EXPECT_DOUBLE_EQ(plan["step_time_s"].get<double>(), estimate["step_time_s"].get<double>());
  EXPECT_NE(plan["step_time_from"].get<std::string>().find("resnet50 at batch 32"),
            std::string::npos);
}

TEST(LoaderCli, JudgesGivenSettings) {
  const nlohmann::json j =
      run_json({"loader", "--profile", profile(), "--step-time", "80ms", "--batch", "32",
                "--num-workers", "12", "--prefetch-factor", "4", "--shm-size", "64MB"});
  EXPECT_EQ(j["chosen"], false);
  EXPECT_EQ(j["num_workers"], 12);
  EXPECT_EQ(j["prefetch_factor"], 4);
  std::vector<std::string> codes;
  for (const auto& w : j["warnings"]) codes.push_back(w["code"]);
  EXPECT_NE(std::find(codes.begin(), codes.end(), "too_many_workers"), codes.end());
}

TEST(LoaderCli, BadInputIsOneLine) {
  const std::vector<std::string> base = {"loader", "--profile", profile()};
  const struct {
    std::vector<std::string> args;
    const char* expected;
  } cases[] = {
      {{"loader", "--profile", "/nonexistent.json", "--step-time", "80ms", "--batch", "8"},
       "cannot open loader profile '/nonexistent.json'"},
      {concat(base, {"--batch", "8"}), "needs the GPU's rate"},
      {concat(base, {"--step-time", "80ms", "--model", "resnet50", "--batch", "8"}), "not both"},
      {concat(base, {"--step-time", "80ms"}), "loader needs --batch N"},
      {concat(base, {"--step-time", "80", "--batch", "8"}), "'80' is not a duration"},
      {concat(base, {"--step-time", "-1ms", "--batch", "8"}), "is not a duration"},
      {concat(base, {"--step-time", "80ms", "--batch", "8", "--pin-memory", "yes"}),
       "--pin-memory 'yes': use true or false"},
      {concat(base, {"--step-time", "80ms", "--batch", "8", "--prefetch-factor", "4"}),
       "give --num-workers N with them"},
      {concat(base, {"--step-time", "80ms", "--batch", "8", "--num-workers", "0",
                     "--persistent-workers", "true"}),
       "--persistent-workers with --num-workers 0"},
      {concat(base, {"--step-time", "80ms", "--batch", "8", "--shm-size", "lots"}), "--shm-size"},
      {concat(base, {"--model", "resnet50", "--batch", "8"}), "needs a GPU"},
      {concat(base, {"--model", "resnet5", "--batch", "8", "--gpu", "rtx4090"}), "resnet5"},
      {concat(base, {"--step-time", "80ms", "--batch", "8", "--num-workers", "5000"}),
       "--num-workers 5000: must be 0 to 4096"},
  };
  for (const auto& c : cases) {
    const CliRun r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.expected;
    EXPECT_NE(r.err.find(c.expected), std::string::npos)
        << "expected '" << c.expected << "' in: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace trainfit
