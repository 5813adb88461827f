#include "schedule/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "base/size_math.h"

namespace trainfit {
namespace {

// Patience values the replays also try beside the one given.
const std::vector<int64_t> kSweepPatience = {1, 2, 3, 5, 10, 20, 50};

std::vector<int64_t> sweep_patience(int64_t given, int64_t epochs) {
  std::set<int64_t> p;
  for (int64_t v : kSweepPatience) {
    if (v < epochs) p.insert(v);
  }
  p.insert(given);
  return {p.begin(), p.end()};
}

Status check_lrs(const std::vector<double>& lrs) {
  if (lrs.empty()) {
    return invalid_argument("no learning rate given", "add --lr, e.g. --lr 0.1 (one per group)");
  }
  for (double lr : lrs) {
    if (!(lr >= 0) || !std::isfinite(lr)) {
      return invalid_argument(fmt::format("--lr {} is not a learning rate", lr),
                              "give a number from 0, e.g. --lr 0.1");
    }
  }
  return {};
}

struct PlateauRun {
  std::vector<std::vector<double>> lrs;
  std::vector<PlateauDrop> drops;
};

PlateauRun replay_plateau(const std::vector<double>& base_lrs, const PlateauOptions& options,
                          const std::vector<double>& metrics, int64_t epochs) {
  Optimizer opt = Optimizer::with_lrs(base_lrs);
  ReduceLROnPlateau plateau(opt, options);
  PlateauRun run;
  run.lrs.resize(base_lrs.size());
  for (int64_t e = 0; e < epochs; ++e) {
    for (size_t g = 0; g < base_lrs.size(); ++g) run.lrs[g].push_back(opt.param_groups[g].lr);
    if (plateau.step(metrics[static_cast<size_t>(e)])) run.drops.push_back({e + 1, opt.lrs()});
  }
  return run;
}

}  // namespace

StopReplay replay_early_stopping(const std::vector<double>& values,
                                 const EarlyStoppingOptions& options) {
  EarlyStopping stop(options);
  StopReplay r{.patience = options.patience};
  for (size_t e = 0; e < values.size(); ++e) {
    if (stop.step(values[e])) {
      r.stopped_epoch = static_cast<int64_t>(e);
      break;
    }
  }
  r.best_epoch = stop.best_epoch();
  r.best_value = stop.best_value();
  return r;
}

Result<Schedule> make_schedule(const ScheduleRequest& request) {
  TF_RETURN_IF_ERROR(check_lrs(request.lrs));
  Schedule s;
  s.scheduler = request.scheduler.to_python();
  s.interval = request.interval;
  s.steps_per_epoch = request.steps_per_epoch;
  s.metrics = request.metrics;
  s.early_stopping = request.early_stopping;
  bool plateau = request.scheduler.name == kReduceLROnPlateau;
  int64_t metric_count = request.metrics ? static_cast<int64_t>(request.metrics->values.size()) : 0;

  s.epochs = request.epochs;
  if (s.epochs == 0) {
    if (!request.metrics) {
      return invalid_argument("the schedule needs a length", "add --epochs N");
    }
    s.epochs = metric_count;
  }
  if (s.epochs < 1) return invalid_argument("--epochs must be at least 1", "e.g. --epochs 100");
  if (request.steps_per_epoch < 0) {
    return invalid_argument("--steps-per-epoch must be at least 1", "e.g. --steps-per-epoch 500");
  }
  if (request.interval == StepInterval::kStep && request.steps_per_epoch == 0) {
    return invalid_argument("stepping every iteration needs --steps-per-epoch",
                            "add --steps-per-epoch M (len(train_loader))");
  }
  if ((plateau || request.early_stopping) && !request.metrics) {
    return invalid_argument(fmt::format("{} replays a validation curve",
                                        plateau ? "ReduceLROnPlateau" : "early stopping"),
                            "add --metrics FILE.csv with one value per epoch");
  }
  if (request.metrics && metric_count < s.epochs) {
    return invalid_argument(
        fmt::format("--metrics has {} values of {}, --epochs {} needs one per epoch", metric_count,
                    request.metrics->column, s.epochs),
        fmt::format("leave --epochs out to replay the {} logged epochs", metric_count));
  }
  std::optional<int64_t> count =
      checked_mul(s.epochs, request.interval == StepInterval::kStep ? request.steps_per_epoch : 1);
  if (!count || *count > kMaxScheduleSteps) {
    return out_of_range(fmt::format("{} epochs of {} steps is more than {} scheduler steps",
                                    s.epochs, request.steps_per_epoch, kMaxScheduleSteps),
                        "show the schedule per epoch (--interval epoch) or over fewer epochs");
  }

  std::vector<double> metrics;
  if (request.metrics) {
    metrics.assign(request.metrics->values.begin(), request.metrics->values.begin() + s.epochs);
  }
  if (plateau) {
    if (request.interval == StepInterval::kStep) {
      return invalid_argument("ReduceLROnPlateau steps once per validation, not per iteration",
                              "leave out --interval step");
    }
    TF_ASSIGN_OR_RETURN(PlateauOptions options,
                        plateau_options(request.scheduler, request.lrs.size()));
    PlateauRun run = replay_plateau(request.lrs, options, metrics, s.epochs);
    s.lrs = std::move(run.lrs);
    s.drops = std::move(run.drops);
    for (int64_t p : sweep_patience(options.patience, s.epochs)) {
      PlateauOptions o = options;
      o.patience = p;
      PlateauRun r = replay_plateau(request.lrs, o, metrics, s.epochs);
      PlateauReplay replay{.patience = p,
                           .final_lr = r.drops.empty() ? request.lrs[0] : r.drops.back().lrs[0]};
      for (const PlateauDrop& d : r.drops) replay.drop_epochs.push_back(d.epoch);
      s.plateau_sweep.push_back(std::move(replay));
    }
    s.plateau = options;
  } else {
    Optimizer opt = Optimizer::with_lrs(request.lrs);
    TF_ASSIGN_OR_RETURN(std::unique_ptr<LRScheduler> scheduler,
                        make_lr_scheduler(request.scheduler, opt, {.steps = *count}));
    s.lrs.resize(request.lrs.size());
    for (auto& g : s.lrs) g.reserve(static_cast<size_t>(*count));
    for (int64_t i = 0; i < *count; ++i) {
      for (size_t g = 0; g < s.lrs.size(); ++g) s.lrs[g].push_back(opt.param_groups[g].lr);
      if (i + 1 < *count) TF_RETURN_IF_ERROR(scheduler->step());
    }
    if (request.scheduler.name == "OneCycleLR" && request.scheduler.positional.empty()) {
      bool given = false;
      for (const auto& [k, v] : request.scheduler.keywords) {
        given = given || k == "total_steps" || k == "epochs";
      }
      if (!given)
        s.notes.push_back(fmt::format("OneCycleLR's total_steps is the run's {} steps", *count));
    }
  }
  if (request.early_stopping) {
    s.stop = replay_early_stopping(metrics, *request.early_stopping);
    for (int64_t p : sweep_patience(request.early_stopping->patience, s.epochs)) {
      EarlyStoppingOptions o = *request.early_stopping;
      o.patience = p;
      s.stop_sweep.push_back(replay_early_stopping(metrics, o));
    }
  }
  return s;
}

}  // namespace trainfit
