// The loader profile parser on a profile the probe wrote on this machine
// (tests/data/loader/decode.json: python3 -m trainfit.loader --dataset loader_datasets:decode
// --batch 32), and on broken ones: each is one line naming the field, never a crash.
#include "sources/loader/loader_profile.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sources/parser_fuzz_test_util.h"

namespace trainfit {
namespace {

std::string recorded() {
  std::ifstream in(std::string(TRAINFIT_TEST_DATA_DIR) + "/loader/decode.json");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string error_of(const nlohmann::json& doc) {
  const Result<LoaderProfile> p = parse_loader_profile(doc.dump(), "edited.json");
  return p.ok() ? "" : p.status().to_string();
}

TEST(LoaderProfile, ParsesWhatTheProbeWrites) {
  const std::string text = recorded();
  ASSERT_FALSE(text.empty());
  const nlohmann::json doc = nlohmann::json::parse(text);
  const Result<LoaderProfile> p = parse_loader_profile(text, "decode.json");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->source, "decode.json");
  EXPECT_EQ(p->dataset, "loader_datasets:decode");
  EXPECT_EQ(p->length, doc["dataset"]["length"].get<int64_t>());
  EXPECT_EQ(p->batch_size, 32);
  EXPECT_EQ(p->host.start_method, doc["host"]["start_method"].get<std::string>());
  EXPECT_EQ(p->host.affinity.size(), doc["host"]["affinity"].size());
  EXPECT_EQ(p->main.pss_bytes, doc["memory"]["main"]["pss_bytes"].get<int64_t>());
  EXPECT_DOUBLE_EQ(p->fetch.mean_s, doc["fetch"]["first_touch"]["mean_s"].get<double>());
  EXPECT_EQ(p->batch.tensors, 2);
  EXPECT_EQ(p->batch.tensor_bytes.size(), 2u);
  ASSERT_EQ(p->runs.size(), doc["workers"].size());
  for (size_t i = 0; i < p->runs.size(); ++i) {
    EXPECT_EQ(p->runs[i].num_workers, doc["workers"][i]["num_workers"].get<int64_t>());
    EXPECT_EQ(p->runs[i].workers.size(), doc["workers"][i]["worker_memory"].size());
  }
  EXPECT_TRUE(p->before_dataset && p->after_dataset);
}

TEST(LoaderProfile, AnUnfinishedProbeIsRefusedWithItsReason) {
  nlohmann::json doc = nlohmann::json::parse(recorded());
  doc["complete"] = false;
  doc["stopped"] = "the dataset raised at index 5: ValueError: corrupt sample 5";
  const std::string e = error_of(doc);
  EXPECT_NE(e.find("the probe stopped early (the dataset raised at index 5"), std::string::npos)
      << e;
  EXPECT_NE(e.find("edited.json"), std::string::npos);
}

TEST(LoaderProfile, BadFieldsAreNamed) {
  const nlohmann::json good = nlohmann::json::parse(recorded());
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    const char* expected;
  };
  const Case cases[] = {
      {[](auto& d) { d["format"] = "trainfit-gpu-profile"; }, "not a trainfit loader profile"},
      {[](auto& d) { d["version"] = 2; }, "version 2; this trainfit reads version 1"},
      {[](auto& d) { d["dataset"]["length"] = 0; }, "profile.dataset: 'length' must be at least 1"},
      {[](auto& d) { d["memory"]["main"]["pss_bytes"] = -1; }, "'pss_bytes' must be at least 0"},
      {[](auto& d) { d["memory"]["main"]["pss_bytes"] = 1e30; }, "'pss_bytes' must be an integer"},
      {[](auto& d) { d["host"]["start_method"] = "thread"; }, "use fork, spawn or forkserver"},
      {[](auto& d) { d["host"]["affinity"] = nlohmann::json::array(); },
       "'affinity' must list at least one CPU"},
      {[](auto& d) { d["batch"]["tensor_bytes"].push_back(4); },
       "'tensor_bytes' must hold one size per tensor"},
      {[](auto& d) { d["fetch"]["first_touch"]["mean_s"] = "fast"; }, "'mean_s' must be a number"},
      {[](auto& d) { d["workers"][0]["num_workers"] = 5000; }, "must be at most 4096"},
      {[](auto& d) { d["workers"][1]["worker_memory"].push_back(nullptr); },
       "more workers than 'num_workers'"},
      {[](auto& d) { d["memory"]["inventory"]["tensor_bytes"] = int64_t{1} << 40; },
       "'tensor_bytes' is more than 'flat_buffer_bytes'"},
      {[](auto& d) { d.erase("batch"); }, "'batch' is missing"},
  };
  for (const Case& c : cases) {
    nlohmann::json doc = good;
    c.edit(doc);
    const std::string e = error_of(doc);
    EXPECT_NE(e.find(c.expected), std::string::npos)
        << "expected '" << c.expected << "', got '" << e << "'";
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
}

TEST(LoaderProfile, TruncatedAndMutatedFilesAreErrorsNotCrashes) {
  const std::string text = nlohmann::json::parse(recorded()).dump();
  const int refused = fuzz_parser(
      text, 5, [](std::string_view t) { return parse_loader_profile(t, "fuzzed.json"); },
      [](const LoaderProfile& p) {
        // What is accepted keeps the invariants the planner relies on.
        EXPECT_GE(p.length, 1);
        EXPECT_GE(p.batch_size, 1);
        EXPECT_FALSE(p.host.affinity.empty());
        EXPECT_EQ(p.batch.tensor_bytes.size(), static_cast<size_t>(p.batch.tensors));
      });
  // Three random bytes in a profile's JSON break it far more often than not.
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace trainfit
