// The trainfit command line, callable in-process (tests parse argv without a subprocess).
//
//   std::ostringstream out, err;
//   int code = run_cli({"trainfit", "summary", "--model", "resnet18", "--json"}, out, err);
//
// Exit codes: 0 success, 2 bad input (one line naming the problem, with a hint).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"

namespace trainfit {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 2;

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// A subcommand's run step, bound to its parsed options.
using CommandRun = std::function<int(std::ostream& out, std::ostream& err)>;

// Prints "trainfit: error: <message> (hint: <hint>)" and returns kExitBadInput.
int report_error(std::ostream& err, const Status& status);

// One setup function per subcommand, each in cmd_<name>.cc.
CommandRun setup_estimate(CLI::App& app);
CommandRun setup_compare(CLI::App& app);
CommandRun setup_fit(CLI::App& app);
CommandRun setup_summary(CLI::App& app);
CommandRun setup_gpus(CLI::App& app);
CommandRun setup_models(CLI::App& app);
CommandRun setup_ops(CLI::App& app);
CommandRun setup_loader(CLI::App& app);
CommandRun setup_launch(CLI::App& app);
CommandRun setup_schedule(CLI::App& app);
CommandRun setup_doctor(CLI::App& app);
CommandRun setup_latency(CLI::App& app);
CommandRun setup_monitor(CLI::App& app);

}  // namespace trainfit
