// `trainfit schedule` against PyTorch's values recorded by validation/check_schedules.py
// (tests/data/schedules/torch_lr.json), and one line with exit 2 for every bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli/cli_test_util.h"

namespace trainfit {
namespace {

std::string data_dir() {
  return TRAINFIT_TEST_DATA_DIR;
}

std::string with_data(std::string arg) {
  size_t at = arg.find("{data}");
  if (at != std::string::npos) arg.replace(at, 6, data_dir());
  return arg;
}

nlohmann::json recorded() {
  std::ifstream in(data_dir() + "/schedules/torch_lr.json");
  return nlohmann::json::parse(in);
}

TEST(ScheduleCli, EveryRecordedCaseEqualsPyTorch) {
  const nlohmann::json cases = recorded()["cases"];
  ASSERT_GE(cases.size(), 20u);
  for (const nlohmann::json& c : cases) {
    std::vector<std::string> args;
    for (const auto& a : c["args"]) args.push_back(with_data(a.get<std::string>()));
    const CliRun r = run(args);
    SCOPED_TRACE(args[2]);
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json ours = j.contains("lr_groups") ? j["lr_groups"] : nlohmann::json{j["lr"]};
    const nlohmann::json& theirs = c["lr_groups"];
    ASSERT_EQ(ours.size(), theirs.size());
    for (size_t g = 0; g < theirs.size(); ++g) {
      ASSERT_EQ(ours[g].size(), theirs[g].size());
      for (size_t i = 0; i < theirs[g].size(); ++i) {
        const double a = ours[g][i].get<double>(), b = theirs[g][i].get<double>();
        ASSERT_LE(std::fabs(a - b), 1e-12 * std::fabs(b)) << "group " << g << " step " << i;
      }
    }
    if (c.contains("stopped_epoch")) {
      EXPECT_EQ(j["stopped_epoch"], c["stopped_epoch"]);
      EXPECT_EQ(j["best_epoch"], c["best_epoch"]);
      EXPECT_EQ(j["best_value"].get<double>(), c["best_value"].get<double>());
    }
  }
}

TEST(ScheduleCli, TextShowsThePlotAndTheReplays) {
  const CliRun r =
      run({"schedule", "--scheduler", "ReduceLROnPlateau(factor=0.5, patience=2)", "--lr", "0.1",
           "--metrics", data_dir() + "/schedules/val_loss.csv", "--early-stopping", "patience=5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("+----"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ReduceLROnPlateau lowers the rate (v) from epochs"), std::string::npos);
  EXPECT_NE(r.out.find("Early stopping (patience 5"), std::string::npos);
  const size_t axis = r.out.find("+----");
  const std::string marks = r.out.substr(axis, r.out.find('\n', r.out.find('\n', axis) + 1) - axis);
  EXPECT_NE(marks.find('S'), std::string::npos) << marks;  // the stop, under the axis
  EXPECT_NE(marks.find('v'), std::string::npos) << marks;  // the plateau's drops
}

TEST(ScheduleCli, PerStepByDefaultWithStepsPerEpoch) {
  const nlohmann::json j = run_json({"schedule", "--scheduler", "StepLR(step_size=2)", "--lr", "1",
                                     "--epochs", "3", "--steps-per-epoch", "4"});
  EXPECT_EQ(j["interval"], "step");
  EXPECT_EQ(j["lr"].size(), 12u);
  const nlohmann::json e =
      run_json({"schedule", "--scheduler", "StepLR(step_size=2)", "--lr", "1", "--epochs", "3",
                "--steps-per-epoch", "4", "--interval", "epoch"});
  EXPECT_EQ(e["lr"].size(), 3u);
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(ScheduleCli, BadInputIsOneLineAndExitTwo) {
  const std::string dir = ::testing::TempDir();
  write(dir + "/empty.csv", "");
  write(dir + "/words.csv", "epoch,note\n0,good\n1,bad\n");
  write(dir + "/nan.csv", "val_loss\n0.5\nnan\n");
  write(dir + "/garbage.csv", std::string("\x89PNG\r\n\x1a\n\0\0\0", 11));
  write(dir + "/ragged.csv", "epoch,val_loss\n0,0.5\n1\n");
  write(dir + "/two.csv", "loss_a,loss_b\n1,2\n");
  const std::vector<std::vector<std::string>> bad = {
      {"--scheduler", "CosineAnnealingWarmRestarts", "--set", "T_0=0", "--lr", "0.1", "--epochs",
       "10"},
      {"--scheduler", "MultiStepLR(milestones=[30, 20])", "--lr", "0.1", "--epochs", "10"},
      {"--scheduler", "MultiStepLR", "--set", "milestones=5,5", "--lr", "0.1", "--epochs", "10"},
      {"--scheduler", "SequentialLR(schedulers=[ConstantLR(), StepLR(3)], milestones=[5, 9])",
       "--lr", "0.1", "--epochs", "10"},
      {"--scheduler", "OneCycleLR(max_lr=0.1, total_steps=5)", "--epochs", "10"},
      {"--scheduler", "OneCycleLR(max_lr=0.1, total_steps=2, pct_start=0.5)", "--epochs", "2"},
      {"--scheduler", "StepLR(step_size=3, gama=0.5)", "--lr", "0.1", "--epochs", "10"},
      {"--scheduler", "StepLR(step_size=3.5)", "--lr", "0.1", "--epochs", "10"},
      {"--scheduler", "StepLr", "--lr", "0.1", "--epochs", "10"},
      {"--scheduler", "StepLR(step_size=3", "--lr", "0.1", "--epochs", "10"},
      {"--scheduler", "StepLR(3)", "--lr", "fast", "--epochs", "10"},
      {"--scheduler", "StepLR(3)", "--epochs", "10"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--epochs", "1000000", "--steps-per-epoch",
       "1000000"},
      {"--scheduler", "ReduceLROnPlateau", "--lr", "0.1", "--epochs", "10"},
      {"--scheduler", "ReduceLROnPlateau(factor=2)", "--lr", "0.1", "--metrics",
       data_dir() + "/schedules/val_loss.csv"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics", dir + "/empty.csv"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics", dir + "/words.csv"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics", dir + "/nan.csv"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics", dir + "/garbage.csv"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics", dir + "/ragged.csv"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics", dir + "/two.csv"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics", dir + "/missing.csv"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics",
       data_dir() + "/schedules/val_loss.csv", "--epochs", "500"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--epochs", "10", "--early-stopping",
       "patience=3"},
      {"--scheduler", "StepLR(3)", "--lr", "0.1", "--metrics",
       data_dir() + "/schedules/val_loss.csv", "--early-stopping", "patiense=3"},
  };
  for (std::vector<std::string> args : bad) {
    args.insert(args.begin(), "schedule");
    const CliRun r = run(args);
    SCOPED_TRACE(::testing::PrintToString(args));
    EXPECT_EQ(r.code, 2);
    EXPECT_TRUE(r.out.empty());
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("(hint: "), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace trainfit
