// The MODEL-SOURCE and TRAINING OPTIONS flags shared by every command that builds a model.
//
//   ModelSourceOptions opts;
//   add_model_source(app, opts);              // --model, --set, --batch, --input, ...
//   Result<ModelRequest> r = to_request(opts); // after parsing
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sources/zoo/zoo.h"

namespace trainfit {

struct ModelSourceOptions {
  std::string model;
  std::string trace;  // a recorded trace instead of a zoo model
  std::vector<std::string> sets;
  int64_t batch = 1;
  std::string input;
  std::optional<int64_t> seq_len;
  std::string precision = "fp32";
  std::string device_profile = "cuda";
  std::vector<std::string> freeze;
};

void add_model_source(CLI::App& app, ModelSourceOptions& options);
Result<ModelRequest> to_request(const ModelSourceOptions& options);

}  // namespace trainfit
