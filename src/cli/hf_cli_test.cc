// `--hf-config`: a Hugging Face config.json read as the zoo model and --set keys it names.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_test_util.h"

namespace trainfit {
namespace {

const std::string kExamples = std::string(TRAINFIT_TEST_DATA_DIR) + "/../../examples/";

// The config file and the zoo model with its fields as --set keys are the same request.
TEST(HfConfigCli, ConfigFileEqualsTheModelWithItsFields) {
  const nlohmann::json from_file =
      run_json({"estimate", "--hf-config", kExamples + "llama-3.2-1b.json", "--seq-len", "512",
                "--precision", "bf16"});
  const nlohmann::json from_sets =
      run_json({"estimate", "--model", "llama", "--set", "hidden_size=2048", "--set",
                "intermediate_size=8192", "--set", "num_hidden_layers=16", "--set",
                "tie_word_embeddings=true", "--set", "max_position_embeddings=131072", "--seq-len",
                "512", "--precision", "bf16"});
  EXPECT_EQ(from_file.at("parameters"), 1'235'814'400);
  EXPECT_EQ(from_file.at("peak_allocated_bytes"), from_sets.at("peak_allocated_bytes"));
  EXPECT_EQ(from_file.at("peak_reserved_bytes"), from_sets.at("peak_reserved_bytes"));
}

// --set keys apply on top of the file's fields.
TEST(HfConfigCli, SetKeysOverrideTheFile) {
  const nlohmann::json two_layers =
      run_json({"estimate", "--hf-config", kExamples + "llama-3-8b.json", "--set",
                "num_hidden_layers=2", "--seq-len", "128"});
  EXPECT_EQ(two_layers.at("parameters"), 8'030'261'248 - int64_t{30} * 218'112'000);
}

TEST(HfConfigCli, BadFilesAndSourcesAreOneLineAndExit2) {
  const std::vector<std::vector<std::string>> cases{
      {"estimate", "--hf-config", "/nonexistent/config.json"},
      {"estimate", "--hf-config", kExamples + "llama-3-8b.json", "--model", "llama"},
      {"estimate", "--hf-config", std::string(TRAINFIT_TEST_DATA_DIR) + "/../../README.md"},
      {"fit", "--hf-config", kExamples + "mistral-7b-v0.1.json", "--seq-len", "8192", "--gpu",
       "h100"},
  };
  for (const auto& args : cases) {
    SCOPED_TRACE(args[2]);
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace trainfit
