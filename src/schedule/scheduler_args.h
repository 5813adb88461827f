// A scheduler call's arguments bound to its Python signature: positional arguments in PyTorch's
// order, keywords by name, defaults filled in, each read as the type PyTorch expects.
//
//   Result<SchedulerArgs> a = SchedulerArgs::bind(spec, {{"step_size"}, {"gamma", "0.1"}});
//   Result<int64_t> step_size = a->integer("step_size");
//   Result<std::vector<double>> max_lrs = a->per_group("max_lr", groups);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedule/spec.h"

namespace trainfit {

// One parameter of a scheduler's __init__, after the optimizer.
struct SchedulerParam {
  std::string name;
  std::optional<std::string> default_value;  // as Python writes it; nullopt: required, "None"
};

class SchedulerArgs {
 public:
  static Result<SchedulerArgs> bind(const SchedulerSpec& spec,
                                    const std::vector<SchedulerParam>& signature);

  bool is_none(const std::string& name) const;  // not given and defaulting to None
  const SpecValue& value(const std::string& name) const;
  Result<int64_t> integer(const std::string& name) const;
  Result<double> number(const std::string& name) const;
  Result<std::string> word(const std::string& name, const std::vector<std::string>& allowed) const;
  Result<bool> boolean(const std::string& name) const;
  // One number for every parameter group, or one list with a number per group.
  Result<std::vector<double>> per_group(const std::string& name, size_t groups) const;
  Result<std::vector<int64_t>> integers(const std::string& name) const;
  Result<std::vector<SchedulerSpec>> calls(const std::string& name) const;

  const std::string& scheduler() const { return scheduler_; }

 private:
  Status type_error(const std::string& name, std::string_view expected) const;

  std::string scheduler_;
  std::vector<std::pair<std::string, SpecValue>> values_;  // every parameter, None omitted
};

}  // namespace trainfit
