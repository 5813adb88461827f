#include "schedule/scheduler_args.h"

#include <fmt/format.h>

#include <cmath>

#include "base/suggest.h"

namespace trainfit {

Result<SchedulerArgs> SchedulerArgs::bind(const SchedulerSpec& spec,
                                          const std::vector<SchedulerParam>& signature) {
  SchedulerArgs args;
  args.scheduler_ = spec.name;
  std::vector<std::string> names;
  names.reserve(signature.size());
  for (const SchedulerParam& p : signature) names.push_back(p.name);
  if (spec.positional.size() > signature.size()) {
    return invalid_argument(
        fmt::format("{} takes at most {} arguments after the optimizer, {} given", spec.name,
                    signature.size(), spec.positional.size()),
        fmt::format("its keywords: {}", fmt::join(names, ", ")));
  }
  std::vector<std::optional<SpecValue>> given(signature.size());
  for (size_t i = 0; i < spec.positional.size(); ++i) given[i] = spec.positional[i];
  for (const auto& [key, v] : spec.keywords) {
    size_t i = 0;
    while (i < signature.size() && signature[i].name != key) ++i;
    if (i == signature.size()) {
      std::string near = closest(key, names);
      return not_found(fmt::format("{} has no keyword '{}'", spec.name, key),
                       near.empty() ? fmt::format("its keywords: {}", fmt::join(names, ", "))
                                    : fmt::format("did you mean {}?", near));
    }
    if (given[i]) {
      return invalid_argument(fmt::format("{} got '{}' twice", spec.name, key),
                              "give it once, by position or by keyword");
    }
    given[i] = v;
  }
  for (size_t i = 0; i < signature.size(); ++i) {
    const SchedulerParam& p = signature[i];
    if (given[i]) {
      args.values_.emplace_back(p.name, *given[i]);
      continue;
    }
    if (!p.default_value) {
      return invalid_argument(fmt::format("{} needs {}", spec.name, p.name),
                              fmt::format("add --set {}=VALUE", p.name));
    }
    if (*p.default_value == "None") continue;
    Result<SpecValue> v = parse_spec_value(*p.default_value);
    TF_CHECK(v.ok()) << p.name << " default " << *p.default_value;
    args.values_.emplace_back(p.name, std::move(*v));
  }
  return args;
}

bool SchedulerArgs::is_none(const std::string& name) const {
  for (const auto& [k, v] : values_) {
    if (k == name) return false;
  }
  return true;
}

const SpecValue& SchedulerArgs::value(const std::string& name) const {
  for (const auto& [k, v] : values_) {
    if (k == name) return v;
  }
  TF_CHECK(false) << scheduler_ << " has no value for " << name;
  static const SpecValue kNone;
  return kNone;
}

Status SchedulerArgs::type_error(const std::string& name, std::string_view expected) const {
  return invalid_argument(
      fmt::format("{}: {}={} is not {}", scheduler_, name, value(name).to_python(), expected),
      fmt::format("give {} as {}", name, expected));
}

Result<int64_t> SchedulerArgs::integer(const std::string& name) const {
  const SpecValue& v = value(name);
  if (v.kind != SpecValue::Kind::kNumber || !v.is_integer) return type_error(name, "an integer");
  return static_cast<int64_t>(v.number);
}

Result<double> SchedulerArgs::number(const std::string& name) const {
  const SpecValue& v = value(name);
  if (v.kind != SpecValue::Kind::kNumber) return type_error(name, "a number");
  return v.number;
}

Result<std::string> SchedulerArgs::word(const std::string& name,
                                        const std::vector<std::string>& allowed) const {
  const SpecValue& v = value(name);
  for (const std::string& a : allowed) {
    if (v.kind == SpecValue::Kind::kString && v.text == a) return a;
  }
  return type_error(name, fmt::format("one of {}", fmt::join(allowed, ", ")));
}

Result<bool> SchedulerArgs::boolean(const std::string& name) const {
  const SpecValue& v = value(name);
  if (v.kind != SpecValue::Kind::kBool) return type_error(name, "True or False");
  return v.boolean;
}

Result<std::vector<double>> SchedulerArgs::per_group(const std::string& name, size_t groups) const {
  const SpecValue& v = value(name);
  if (v.kind == SpecValue::Kind::kNumber) return std::vector<double>(groups, v.number);
  if (v.kind != SpecValue::Kind::kList) return type_error(name, "a number or a list of numbers");
  if (v.list.size() != groups) {
    return invalid_argument(fmt::format("{}: {} has {} values for {} parameter groups", scheduler_,
                                        name, v.list.size(), groups),
                            "give one value, or one per --lr");
  }
  std::vector<double> out;
  for (const SpecValue& item : v.list) {
    if (item.kind != SpecValue::Kind::kNumber) return type_error(name, "a list of numbers");
    out.push_back(item.number);
  }
  return out;
}

Result<std::vector<int64_t>> SchedulerArgs::integers(const std::string& name) const {
  const SpecValue& v = value(name);
  if (v.kind == SpecValue::Kind::kNumber && v.is_integer) {
    return std::vector<int64_t>{static_cast<int64_t>(v.number)};
  }
  if (v.kind != SpecValue::Kind::kList) return type_error(name, "a list of integers");
  std::vector<int64_t> out;
  for (const SpecValue& item : v.list) {
    if (item.kind != SpecValue::Kind::kNumber || !item.is_integer) {
      return type_error(name, "a list of integers");
    }
    out.push_back(static_cast<int64_t>(item.number));
  }
  return out;
}

Result<std::vector<SchedulerSpec>> SchedulerArgs::calls(const std::string& name) const {
  const SpecValue& v = value(name);
  std::vector<SchedulerSpec> out;
  if (v.kind == SpecValue::Kind::kList) {
    for (const SpecValue& item : v.list) {
      if (item.kind != SpecValue::Kind::kCall) break;
      out.push_back(*item.call);
    }
    if (out.size() == v.list.size() && !out.empty()) return out;
  }
  return type_error(name, "a list of schedulers such as [LinearLR(total_iters=5), StepLR(30)]");
}

}  // namespace trainfit
