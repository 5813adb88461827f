// Running the command line in-process from the CLI tests.
//
//   CliRun r = run({"estimate", "--model", "resnet18"});   // "trainfit" is prepended
//   r.code, r.out, r.err
#pragma once

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

}  // namespace trainfit
