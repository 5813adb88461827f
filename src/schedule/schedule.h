// `trainfit schedule` as a library call: a scheduler replayed over a run, with its learning rate
// at every epoch (or iteration), and, given the run's validation curve, where ReduceLROnPlateau
// would have lowered it and where early stopping would have ended the run.
//
//   ScheduleRequest r;
//   r.scheduler = *parse_scheduler_spec("CosineAnnealingWarmRestarts(T_0=10, T_mult=2)");
//   r.lrs = {0.1};
//   r.epochs = 70;
//   Result<Schedule> s = make_schedule(r);
//   s->lrs[0][i];   // param_groups[0]["lr"] before the i-th scheduler.step()
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedule/metrics_csv.h"
#include "schedule/plateau.h"
#include "schedule/spec.h"

namespace trainfit {

enum class StepInterval { kEpoch, kStep };  // scheduler.step() after each epoch or iteration

inline constexpr int64_t kMaxScheduleSteps = 2'000'000;

struct ScheduleRequest {
  SchedulerSpec scheduler;
  std::vector<double> lrs;      // the optimizer's lr, one per parameter group
  int64_t epochs = 0;           // 0: one per metrics value
  int64_t steps_per_epoch = 0;  // 0: not given
  StepInterval interval = StepInterval::kEpoch;
  std::optional<MetricsCurve> metrics;
  std::optional<EarlyStoppingOptions> early_stopping;
};

// Where ReduceLROnPlateau lowered the learning rate: from `epoch` on, `lrs` (one per group).
struct PlateauDrop {
  int64_t epoch = 0;
  std::vector<double> lrs;
};

// Early stopping replayed on the metrics with one patience.
struct StopReplay {
  int64_t patience = 0;
  std::optional<int64_t> stopped_epoch;  // nullopt: it ran every epoch
  int64_t best_epoch = -1;
  double best_value = 0;
};

// ReduceLROnPlateau replayed with one patience.
struct PlateauReplay {
  int64_t patience = 0;
  std::vector<int64_t> drop_epochs;
  double final_lr = 0;  // group 0's after the last metric
};

struct Schedule {
  std::string scheduler;  // as Python would construct it
  StepInterval interval = StepInterval::kEpoch;
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  std::vector<std::vector<double>> lrs;  // [group][i], i = 0 .. epochs (x steps_per_epoch) - 1
  std::vector<std::string> notes;        // defaults the schedule filled in
  // With --metrics:
  std::optional<MetricsCurve> metrics;
  std::optional<PlateauOptions> plateau;
  std::vector<PlateauDrop> drops;
  std::vector<PlateauReplay> plateau_sweep;
  std::optional<EarlyStoppingOptions> early_stopping;
  std::optional<StopReplay> stop;  // with the given patience
  std::vector<StopReplay> stop_sweep;
};

Result<Schedule> make_schedule(const ScheduleRequest& request);

// What early stopping does on `values`.
StopReplay replay_early_stopping(const std::vector<double>& values,
                                 const EarlyStoppingOptions& options);

}  // namespace trainfit
