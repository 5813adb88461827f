// The request options of one command as flags, registered from the option table
// (pipeline/request_options.h), and the training request they make: the one place argv becomes
// a request.
//
//   RequestCli flags(RequestCommand::kEstimate);
//   flags.add_to(app);                                // --model, --batch, --optimizer, --gpu, ...
//   Result<TrainingRequest> r = flags.to_request();   // after parsing
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/request_options.h"

namespace trainfit {

class RequestCli {
 public:
  explicit RequestCli(RequestCommand command);
  RequestCli(const RequestCli&) = delete;  // the app holds pointers into it
  RequestCli& operator=(const RequestCli&) = delete;

  // Registers the command's options with `app`, grouped as the table groups them. Layered: a
  // later value of an option overrides an earlier one (so that a model's own --batch overrides
  // a shared one) and lists add up.
  void add_to(CLI::App& app, bool layered = false);

  // Parses a compare segment's arguments, layered, with a parser of its own.
  Status parse_layered(const std::vector<std::string>& args);

  // Whether the option `key` was given, and its (last) text; "" when not given or a switch.
  bool given(std::string_view key) const;
  std::string text(std::string_view key) const;

  // Reads the files the options name, sets each given option but `leave_out` (a key the
  // command reads itself, as fit's --gpu all) and checks what spans several; the library checks
  // the rest (resolve()).
  Result<TrainingRequest> to_request(std::string_view leave_out = {}) const;

 private:
  struct Slot {
    const RequestOption* option = nullptr;
    std::string flag;
    std::string text;                // a single value
    std::vector<std::string> texts;  // a repeatable one
    bool on = false;                 // a switch
    CLI::Option* cli = nullptr;
  };
  const Slot* slot(std::string_view key) const;

  RequestCommand command_;
  std::vector<Slot> slots_;
  std::unique_ptr<CLI::App> own_app_;  // parse_layered's
};

}  // namespace trainfit
