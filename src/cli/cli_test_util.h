// Running the command line in-process from the CLI tests.
//
//   CliRun r = run({"estimate", "--model", "resnet18"});   // "trainfit" is prepended
//   r.code, r.out, r.err
//   nlohmann::json j = run_json({"fit", "--model", "act", "--gpu", "rtx4090"});  // adds --json
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace trainfit {

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

inline CliRun run(std::vector<std::string> args) {
  args.insert(args.begin(), "trainfit");
  std::ostringstream out, err;
  const int code = run_cli(args, out, err);
  return {code, out.str(), err.str()};
}

// The command's --json output; a failure to run fails the test.
inline nlohmann::json run_json(std::vector<std::string> args) {
  args.emplace_back("--json");
  const CliRun r = run(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{};
}

inline std::vector<std::string> concat(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace trainfit
