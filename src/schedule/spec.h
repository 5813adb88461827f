// A scheduler as the user writes it: PyTorch's class name and keyword names, in the Python call
// syntax people copy from their training scripts, or a bare name with `--set key=value` pairs.
//
//   Result<SchedulerSpec> s = parse_scheduler_spec("CosineAnnealingWarmRestarts(T_0=10,
//   T_mult=2)"); Result<SpecValue> v = parse_spec_value("30,80");        // a list of two integers
//   Result<SchedulerSpec> w = parse_scheduler_spec(
//       "SequentialLR(schedulers=[LinearLR(start_factor=0.1, total_iters=5), "
//       "CosineAnnealingLR(T_max=95)], milestones=[5])");
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace trainfit {

struct SchedulerSpec;

// A Python literal: a number (an int when written without '.', 'e' or 'inf'), a string (quoted,
// or a bare word such as min or cos), True/False, a list, or a nested scheduler call.
struct SpecValue {
  enum class Kind { kNumber, kString, kBool, kList, kCall };
  Kind kind = Kind::kNumber;
  double number = 0;
  bool is_integer = false;
  std::string text;  // kString
  bool boolean = false;
  std::vector<SpecValue> list;
  std::shared_ptr<const SchedulerSpec> call;

  std::string to_python() const;  // as it would be written in Python
};

struct SchedulerSpec {
  std::string name;
  std::vector<SpecValue> positional;
  std::vector<std::pair<std::string, SpecValue>> keywords;  // in the order given

  std::string to_python() const;  // "StepLR(step_size=30, gamma=0.1)"
};

// "StepLR" or "StepLR(30, gamma=0.5)".
Result<SchedulerSpec> parse_scheduler_spec(std::string_view text);
// The value of one `--set key=value`: a literal, or a comma-separated list ("30,80").
Result<SpecValue> parse_spec_value(std::string_view text);
// Adds `--set key=value` pairs to the outermost call; a key given twice is an error.
Status add_set(SchedulerSpec& spec, std::string_view key_value);

}  // namespace trainfit
