// Golden reports for tests: compares a rendered report with tests/data/golden/<name>.
//
//   expect_golden("summary_resnet18_batch8_depth2.txt", summary_text(s, 2));
//
// TRAINFIT_UPDATE_GOLDEN=1 rewrites the file instead; review the diff before committing it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace trainfit {

inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(TRAINFIT_TEST_DATA_DIR) + "/golden/" + name;
  if (std::getenv("TRAINFIT_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << actual;
    return;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing " << path << " (run with TRAINFIT_UPDATE_GOLDEN=1)";
  std::stringstream expected;
  expected << f.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "golden file " << name << " differs";
}

}  // namespace trainfit
