// trainfit launch in seed 003's situation: a baseline batch that does not fit one 24 GB card,
// with two and then four cards.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/units.h"
#include "cli/cli_test_util.h"

namespace trainfit {
namespace {

const std::vector<std::string> kResnet = {"--model",  "resnet50", "--optimizer",
                                          "momentum", "--gpu",    "rtx4090"};

// resnet50 with momentum fits 271 samples on a 24 GiB card (trainfit fit): 512 does not.
TEST(Launch, TheBaselineBatchDoesNotFitOneCard) {
  const nlohmann::json e = run_json(concat(concat({"estimate"}, kResnet), {"--batch", "512"}));
  EXPECT_FALSE(e["fits"].get<bool>());
}

// The plan reaches the baseline's batch exactly, its learning rate follows the rule it names,
// and every configuration it calls fitting fits per `trainfit estimate`.
TEST(Launch, PlanReachesTheBaselineAndEveryConfigurationFits) {
  for (const char* gpus : {"2", "4"}) {
    SCOPED_TRACE(gpus);
    const nlohmann::json j =
        run_json(concat(concat({"launch"}, kResnet), {"--gpus", gpus, "--baseline-batch", "512",
                                                      "--baseline-lr", "0.1", "--cores", "32"}));
    ASSERT_TRUE(j["fits"].get<bool>());
    EXPECT_EQ(j["per_gpu_batch"].get<int64_t>() * j["gpus"].get<int64_t>() *
                  j["grad_accum"].get<int64_t>(),
              512);
    EXPECT_EQ(j["effective_batch"], 512);
    // The baseline's effective batch, reached exactly, keeps the baseline's learning rate: the
    // rule the plan names is "same".
    EXPECT_EQ(j["lr_rule"], "same");
    EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 0.1);
    EXPECT_LE(j["gpus"].get<int>(), std::stoi(gpus));
    int fitting = 0;
    for (const nlohmann::json& c : j["candidates"]) {
      SCOPED_TRACE(c.dump());
      const nlohmann::json e =
          run_json(concat({"estimate"}, c["estimate_args"].get<std::vector<std::string>>()));
      EXPECT_EQ(e["fits"], c["fits"]);
      EXPECT_EQ(e["device_used_bytes"], c["device_used_bytes"]);
      EXPECT_EQ(e["step_time_s"], c["step_time_s"]);
      EXPECT_EQ(c["per_gpu_batch"].get<int64_t>() * c["gpus"].get<int64_t>() *
                    c["grad_accum"].get<int64_t>(),
                512);
      fitting += c["fits"].get<bool>() ? 1 : 0;
    }
    EXPECT_GT(fitting, 0);
    const std::string command = j["command"].get<std::string>();
    if (j["gpus"].get<int>() > 1) {
      EXPECT_NE(command.find("--nproc_per_node=" + std::to_string(j["gpus"].get<int>())),
                std::string::npos)
          << command;
      EXPECT_NE(command.find("OMP_NUM_THREADS=" + std::to_string(32 / j["gpus"].get<int>())),
                std::string::npos)
          << command;
    }
  }
}

// gpt2-large does not fit a 12 GB card even at one sample per GPU over 2 GPUs, FSDP included:
// no plan, and what sharding would leave per GPU by the ZeRO paper's count (16 bytes a trainable
// parameter over 2 GPUs).
TEST(Launch, NothingFitsSaysWhatShardingWouldLeave) {
  const std::vector<std::string> gpt2 = {"--model", "gpt2-large", "--gpu", "rtx3060"};
  const std::vector<std::string> two = {"--gpus",        "2",   "--baseline-batch", "8",
                                        "--baseline-lr", "1e-4"};
  const CliRun r = run(concat(concat({"launch"}, gpt2), two));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Nothing fits"), std::string::npos) << r.out;
  const nlohmann::json e = run_json(concat(concat({"estimate"}, gpt2), {"--batch", "1"}));
  const double psi = e["trainable_parameters"].get<double>();
  const std::string sharded = format_bytes(static_cast<int64_t>(16 * psi / 2));
  EXPECT_NE(r.out.find("ZeRO-3 keeps " + sharded), std::string::npos) << r.out;
  const nlohmann::json j = run_json(concat(concat({"launch"}, gpt2), two));
  EXPECT_FALSE(j["fits"].get<bool>());
  bool fsdp_tried = false;
  for (const nlohmann::json& c : j["candidates"]) {
    EXPECT_FALSE(c["fits"].get<bool>());
    fsdp_tried = fsdp_tried || c["strategy"] == "fsdp";
  }
  EXPECT_TRUE(fsdp_tried) << j.dump(2);
}

// Over 4 GPUs FSDP (each GPT2Block a unit) is the only candidate that fits: the plan takes it,
// says how to wrap the model, and its check command is an estimate with the same wrap that gives
// the plan's device used.
TEST(Launch, ShardsWithFsdpWhenOnlyItFits) {
  const std::vector<std::string> args = {
      "--model", "gpt2-large",       "--gpu", "rtx3060",       "--gpus",
      "4",       "--baseline-batch", "8",     "--baseline-lr", "1e-4"};
  const nlohmann::json j = run_json(concat({"launch"}, args));
  ASSERT_TRUE(j["fits"].get<bool>()) << j.dump(2);
  for (const nlohmann::json& c : j["candidates"]) {
    EXPECT_EQ(c["fits"].get<bool>(), c["strategy"] == "fsdp" && c["gpus"] == 4) << c.dump();
  }
  const CliRun r = run(concat({"launch"}, args));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ModuleWrapPolicy({GPT2Block})"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--strategy fsdp --fsdp-wrap 'transformer.h.*'"), std::string::npos)
      << r.out;
  std::vector<std::string> check = {"estimate"};
  for (const nlohmann::json& a : j["estimate_args"]) check.push_back(a.get<std::string>());
  const nlohmann::json e = run_json(check);
  EXPECT_EQ(e["device_used_bytes"], j["device_used_bytes"]) << j.dump(2);
}

// With --strategy fsdp and its own flags, launch plans FSDP only (one GPU runs without it), with
// the units and mixed precision asked for, and says how to write them.
TEST(Launch, KeepsTheFsdpFlagsItIsGiven) {
  const std::vector<std::string> args = {"--model",
                                         "gpt2-large",
                                         "--gpu",
                                         "rtx3060",
                                         "--gpus",
                                         "4",
                                         "--baseline-batch",
                                         "8",
                                         "--baseline-lr",
                                         "1e-4",
                                         "--strategy",
                                         "fsdp",
                                         "--fsdp-wrap",
                                         "transformer.h.*",
                                         "--fsdp-mixed-precision",
                                         "bf16"};
  const CliRun r = run(concat({"launch"}, args));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ModuleWrapPolicy({GPT2Block}), mixed_precision=MixedPrecision("),
            std::string::npos)
      << r.out;
  const nlohmann::json j = run_json(concat({"launch"}, args));
  ASSERT_TRUE(j["fits"].get<bool>()) << j.dump(2);
  for (const nlohmann::json& c : j["candidates"]) {
    EXPECT_EQ(c["strategy"], c["gpus"] == 1 ? "none" : "fsdp") << c.dump();
    std::vector<std::string> check = {"estimate"};
    for (const nlohmann::json& a : c["estimate_args"]) check.push_back(a.get<std::string>());
    EXPECT_EQ(run_json(check)["device_used_bytes"], c["device_used_bytes"]) << c.dump();
  }
}

TEST(Launch, BadInputIsOneLine) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"launch", "--model", "resnet50", "--gpus", "2", "--baseline-batch", "64",
            "--baseline-lr", "0.1"},                                              // no GPU
           {"launch", "--model", "resnet50", "--gpu", "rtx4090", "--gpus", "2"},  // no baseline
           {"launch", "--model", "resnet50", "--gpu", "rtx4090", "--gpus", "2", "--batch", "8",
            "--baseline-batch", "64", "--baseline-lr", "0.1"},
           {"launch", "--model", "resnet50", "--gpu", "rtx4090", "--gpus", "0", "--baseline-batch",
            "64", "--baseline-lr", "0.1"},
           {"launch", "--model", "resnet50", "--gpu", "rtx4090", "--gpus", "2", "--baseline-batch",
            "64", "--baseline-lr", "0.1", "--cores", "-3"},
           {"launch", "--model", "resnet50", "--gpu", "rtx4090", "--gpus", "2", "--nodes", "2",
            "--baseline-batch", "64", "--baseline-lr", "0.1"}}) {
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

}  // namespace
}  // namespace trainfit
