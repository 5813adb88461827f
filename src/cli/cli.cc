#include "cli/cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>
#include <memory>

#include "base/suggest.h"

namespace trainfit {
namespace {

struct Command {
  const char* name;
  const char* description;
  CommandRun (*setup)(CLI::App&);
};

constexpr Command kCommands[] = {
    {"estimate", "peak GPU memory of training: allocated, reserved, device used, breakdown",
     setup_estimate},
    {"fit",
     "largest batch per GPU, what each memory knob saves and costs, how to fit a target batch",
     setup_fit},
    {"compare", "several models side by side: parameters, activations, peak, what dominates",
     setup_compare},
    {"summary", "per-module table: output shape, parameters, bytes kept for backward",
     setup_summary},
    {"models", "list the model zoo with each model's --set keys", setup_models},
    {"gpus", "list the GPU catalog", setup_gpus},
    {"ops", "list the op registry: what each op keeps for backward", setup_ops},
    {"launch",
     "the GPUs, strategy, per-GPU batch and accumulation that reproduce a baseline's batch, "
     "with the torchrun line",
     setup_launch},
    {"loader",
     "DataLoader settings that feed the GPU, from a probe of your Dataset: workers, prefetch, "
     "host RAM, /dev/shm",
     setup_loader},
    {"schedule",
     "a learning-rate scheduler over a run, and ReduceLROnPlateau and early stopping replayed "
     "on a logged validation curve",
     setup_schedule},
    {"doctor", "check this host for training and fixed-rate loops; says what to fix (read-only)",
     setup_doctor},
    {"latency", "a fixed-rate loop at several rates: wake-up lateness, work time, CPU clock",
     setup_latency},
    {"monitor", "GPU and CPU every second, like nvidia-smi dmon; spots a data-starved GPU",
     setup_monitor},
};

// A first argument that is neither an option nor a command: name it and the nearest command.
Status unknown_command(std::string_view word) {
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.emplace_back(c.name);
  const std::string guess = closest(word, names);
  return invalid_argument(
      fmt::format("unknown command '{}'", word),
      guess.empty() ? fmt::format("commands: {}; see trainfit --help", fmt::join(names, ", "))
                    : fmt::format("did you mean '{}'? see trainfit --help", guess));
}

Status no_command() {
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.emplace_back(c.name);
  return invalid_argument("no command given",
                          fmt::format("start with one of {}, e.g. trainfit estimate --model "
                                      "resnet50; see trainfit --help",
                                      fmt::join(names, ", ")));
}

bool is_command(std::string_view word) {
  return std::any_of(std::begin(kCommands), std::end(kCommands),
                     [&](const Command& c) { return word == c.name; });
}

}  // namespace

int report_error(std::ostream& err, const Status& status) {
  err << "trainfit: error: " << status.to_string() << '\n';
  return kExitBadInput;
}

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "trainfit: predict the GPU memory of a PyTorch training step before you run it.\n"
      "Start with `trainfit models`, then `trainfit summary --model resnet50 --batch 32`.",
      "trainfit"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");
  app.set_version_flag("--version", fmt::format("trainfit {}", TRAINFIT_VERSION),
                       "print trainfit's version and exit");
  // Only the commands the arguments name get their options (--help-all: every one); the others
  // are there for `trainfit --help` to list. Setting up every command's options would be most
  // of what `trainfit --version` costs.
  const bool all = std::find(args.begin(), args.end(), "--help-all") != args.end();
  std::vector<std::pair<CLI::App*, CommandRun>> runs;
  for (const Command& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    if (all || std::find(args.begin(), args.end(), c.name) != args.end()) {
      runs.emplace_back(sub, c.setup(*sub));
    }
  }
  if (args.size() > 1 && !args[1].starts_with("-") && !is_command(args[1])) {
    return report_error(err, unknown_command(args[1]));
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  if (!reversed.empty()) reversed.pop_back();  // the program name
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << '\n';
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    // A subcommand's --help is reported as CallForHelp by the subcommand's parser.
    for (auto& [sub, run] : runs) {
      if (sub->parsed() && e.get_exit_code() == 0) {
        out << sub->help();
        return kExitOk;
      }
    }
    if (e.get_exit_code() == 0) {
      out << app.help();
      return kExitOk;
    }
    std::string where;
    for (auto& [sub, run] : runs) {
      if (sub->parsed()) where = fmt::format("trainfit {} --help", sub->get_name());
    }
    if (where.empty()) return report_error(err, no_command());
    return report_error(err, invalid_argument(e.what(), fmt::format("see {}", where)));
  }
  for (auto& [sub, run] : runs) {
    if (sub->parsed()) return run(out, err);
  }
  return report_error(err, no_command());
}

}  // namespace trainfit
