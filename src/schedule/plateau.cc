#include "schedule/plateau.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainfit {

const std::vector<SchedulerParam>& plateau_signature() {
  static const std::vector<SchedulerParam> kSignature = {
      {"mode", "'min'"},           {"factor", "0.1"}, {"patience", "10"}, {"threshold", "1e-4"},
      {"threshold_mode", "'rel'"}, {"cooldown", "0"}, {"min_lr", "0"},    {"eps", "1e-8"},
      {"verbose", "False"}};
  return kSignature;
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options)
    : optimizer_(optimizer),
      options_(std::move(options)),
      best_(options_.mode == MetricMode::kMin ? std::numeric_limits<double>::infinity()
                                              : -std::numeric_limits<double>::infinity()) {}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  if (options_.mode == MetricMode::kMin) {
    return options_.threshold_relative ? a < best * (1. - options_.threshold)
                                       : a < best - options_.threshold;
  }
  return options_.threshold_relative ? a > best * (options_.threshold + 1.)
                                     : a > best + options_.threshold;
}

bool ReduceLROnPlateau::step(double metric) {
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    bool reduced = reduce_lr();
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
    return reduced;
  }
  return false;
}

bool ReduceLROnPlateau::reduce_lr() {
  bool reduced = false;
  for (size_t i = 0; i < optimizer_.param_groups.size(); ++i) {
    ParamGroup& g = optimizer_.param_groups[i];
    double new_lr = std::max(g.lr * options_.factor, options_.min_lrs[i]);
    if (g.lr - new_lr > options_.eps) {
      g.lr = new_lr;
      reduced = true;
    }
  }
  return reduced;
}

Result<PlateauOptions> plateau_options(const SchedulerSpec& spec, size_t groups) {
  TF_ASSIGN_OR_RETURN(SchedulerArgs a, SchedulerArgs::bind(spec, plateau_signature()));
  PlateauOptions o;
  TF_ASSIGN_OR_RETURN(std::string mode, a.word("mode", {"min", "max"}));
  o.mode = mode == "min" ? MetricMode::kMin : MetricMode::kMax;
  TF_ASSIGN_OR_RETURN(o.factor, a.number("factor"));
  TF_ASSIGN_OR_RETURN(o.patience, a.integer("patience"));
  TF_ASSIGN_OR_RETURN(o.threshold, a.number("threshold"));
  TF_ASSIGN_OR_RETURN(std::string threshold_mode, a.word("threshold_mode", {"rel", "abs"}));
  o.threshold_relative = threshold_mode == "rel";
  TF_ASSIGN_OR_RETURN(o.cooldown, a.integer("cooldown"));
  TF_ASSIGN_OR_RETURN(o.min_lrs, a.per_group("min_lr", groups));
  TF_ASSIGN_OR_RETURN(o.eps, a.number("eps"));
  if (o.factor >= 1.0 || o.factor < 0) {
    return invalid_argument(fmt::format("ReduceLROnPlateau: factor={} is not below 1", o.factor),
                            "factor multiplies the learning rate at a plateau: 0.1 or 0.5");
  }
  if (o.patience < 0 || o.cooldown < 0) {
    return invalid_argument("ReduceLROnPlateau: patience and cooldown cannot be negative",
                            "they count epochs");
  }
  return o;
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : options_(options),
      best_value_(options.mode == MetricMode::kMin ? std::numeric_limits<double>::infinity()
                                                   : -std::numeric_limits<double>::infinity()) {}

bool EarlyStopping::step(double value) {
  ++epoch_;
  bool better = options_.mode == MetricMode::kMin ? value < best_value_ - options_.min_delta
                                                  : value > best_value_ + options_.min_delta;
  if (better) {
    best_value_ = value;
    best_epoch_ = epoch_;
    counter_ = 0;
    return false;
  }
  ++counter_;
  return counter_ >= options_.patience;
}

Status set_early_stopping(EarlyStoppingOptions& options, std::string_view key_value) {
  size_t eq = key_value.find('=');
  std::string key(key_value.substr(0, eq));
  if (eq == std::string_view::npos) {
    return invalid_argument(fmt::format("--early-stopping '{}' is not key=value", key_value),
                            "for example --early-stopping patience=10");
  }
  Result<SpecValue> v = parse_spec_value(key_value.substr(eq + 1));
  if (!v.ok()) return v.status().with_context(fmt::format("--early-stopping {}", key));
  auto bad = [&](std::string_view expected) {
    return invalid_argument(
        fmt::format("--early-stopping {}={} is not {}", key, key_value.substr(eq + 1), expected),
        fmt::format("give {} as {}", key, expected));
  };
  if (key == "patience") {
    if (v->kind != SpecValue::Kind::kNumber || !v->is_integer || v->number < 1) {
      return bad("an integer of at least 1");
    }
    options.patience = static_cast<int64_t>(v->number);
  } else if (key == "min_delta") {
    if (v->kind != SpecValue::Kind::kNumber || v->number < 0) return bad("a number from 0");
    options.min_delta = v->number;
  } else if (key == "mode") {
    if (v->kind != SpecValue::Kind::kString || (v->text != "min" && v->text != "max")) {
      return bad("min or max");
    }
    options.mode = v->text == "min" ? MetricMode::kMin : MetricMode::kMax;
  } else if (key == "restore_best_weights") {
    if (v->kind != SpecValue::Kind::kBool) return bad("True or False");
  } else {
    return not_found(fmt::format("--early-stopping has no key '{}'", key),
                     "its keys: patience, min_delta, mode (as note 004's EarlyStopping)");
  }
  return {};
}

}  // namespace trainfit
