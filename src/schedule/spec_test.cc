#include "schedule/spec.h"

#include <gtest/gtest.h>

#include <random>

namespace trainfit {
namespace {

TEST(SchedulerSpec, ParsesPythonCallsAndPrintsThemBack) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"StepLR", "StepLR()"},
      {"StepLR(30)", "StepLR(30)"},
      {" StepLR ( step_size = 30 , gamma=0.5 ) ", "StepLR(step_size=30, gamma=0.5)"},
      {"MultiStepLR(milestones=[30, 80], gamma=1e-1)",
       "MultiStepLR(milestones=[30, 80], gamma=0.1)"},
      {"OneCycleLR(max_lr=(0.1, 0.01), anneal_strategy=\"linear\", three_phase=True)",
       "OneCycleLR(max_lr=[0.1, 0.01], anneal_strategy='linear', three_phase=True)"},
      {"ReduceLROnPlateau(mode=max, min_lr=-inf)", "ReduceLROnPlateau(mode='max', min_lr=-inf)"},
      {"SequentialLR(schedulers=[LinearLR(total_iters=5), CosineAnnealingLR(T_max=95)], "
       "milestones=[5])",
       "SequentialLR(schedulers=[LinearLR(total_iters=5), CosineAnnealingLR(T_max=95)], "
       "milestones=[5])"},
  };
  for (const auto& [text, python] : cases) {
    Result<SchedulerSpec> s = parse_scheduler_spec(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status().to_string();
    EXPECT_EQ(s->to_python(), python);
  }
}

TEST(SchedulerSpec, SetAddsKeywordsAndListsFromCommas) {
  SchedulerSpec s = *parse_scheduler_spec("MultiStepLR");
  ASSERT_TRUE(add_set(s, "milestones=30,80").ok());
  ASSERT_TRUE(add_set(s, "gamma=0.5").ok());
  EXPECT_EQ(s.to_python(), "MultiStepLR(milestones=[30, 80], gamma=0.5)");
  EXPECT_FALSE(add_set(s, "gamma=0.1").ok());  // given twice
  EXPECT_FALSE(add_set(s, "gamma").ok());
  EXPECT_FALSE(add_set(s, "=1").ok());
}

TEST(SchedulerSpec, RefusesMalformedText) {
  for (const char* text :
       {"", "(", "StepLR(", "StepLR(step_size=)", "StepLR(1,, 2)", "StepLR(gamma=0.1, 30)",
        "StepLR(x=1, x=2)", "StepLR() extra", "StepLR(step_size='30)", "StepLR(1e999)",
        "StepLR(99999999999999999)", "StepLR(-)", "StepLR([1, 2)"}) {
    EXPECT_FALSE(parse_scheduler_spec(text).ok()) << text;
  }
  std::string deep = "A(x=";
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_FALSE(parse_scheduler_spec(deep).ok());
}

// Truncations and random bytes of valid text either parse or fail with a Status, never crash.
TEST(SchedulerSpec, SurvivesTruncatedAndRandomInput) {
  const std::string valid =
      "SequentialLR(schedulers=[LinearLR(start_factor=0.01, total_iters=5), "
      "OneCycleLR(max_lr=[0.1, 0.2], anneal_strategy='cos')], milestones=[5])";
  for (size_t n = 0; n <= valid.size(); ++n) (void)parse_scheduler_spec(valid.substr(0, n));
  std::mt19937 rng(7);
  const std::string alphabet = "()[]=,.'\"eE+-0123456789abcXYZ_ \t";
  for (int i = 0; i < 2000; ++i) {
    std::string text = valid;
    for (int k = 0; k < 4; ++k) {
      text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
    }
    (void)parse_scheduler_spec(text);
    (void)parse_spec_value(text);
  }
}

}  // namespace
}  // namespace trainfit
