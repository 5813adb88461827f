// Schedules driven by a validation curve: PyTorch's ReduceLROnPlateau (torch 1.13) and the
// EarlyStopping class of note 004, replayed over the values a run logged, one per epoch.
//
//   Optimizer opt = Optimizer::with_lrs({0.1});
//   Result<ReduceLROnPlateau> p = make_plateau(*parse_scheduler_spec(
//       "ReduceLROnPlateau(mode='min', factor=0.5, patience=10)"), opt);
//   p->step(val_loss);                                  // after each validation
//   EarlyStopping stop({.patience = 10, .min_delta = 0.001});
//   if (stop.step(val_loss)) ...                        // true: training stops at this epoch
#pragma once

#include <limits>
#include <string_view>
#include <vector>

#include "schedule/lr_scheduler.h"
#include "schedule/scheduler_args.h"

namespace trainfit {

inline constexpr std::string_view kReduceLROnPlateau = "ReduceLROnPlateau";
const std::vector<SchedulerParam>& plateau_signature();

enum class MetricMode { kMin, kMax };  // 'min': lower is better (a loss); 'max': an accuracy

struct PlateauOptions {
  MetricMode mode = MetricMode::kMin;
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  bool threshold_relative = true;  // threshold_mode 'rel' (else 'abs')
  int64_t cooldown = 0;
  std::vector<double> min_lrs;  // one per parameter group
  double eps = 1e-8;
};

class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options);
  // scheduler.step(metrics): true when it lowered some group's learning rate.
  bool step(double metric);
  const PlateauOptions& options() const { return options_; }

 private:
  bool is_better(double a, double best) const;
  bool reduce_lr();

  Optimizer& optimizer_;
  PlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

// ReduceLROnPlateau(...) as the user wrote it, with the optimizer's group count for min_lr.
Result<PlateauOptions> plateau_options(const SchedulerSpec& spec, size_t groups);

struct EarlyStoppingOptions {
  int64_t patience = 10;
  double min_delta = 0;
  MetricMode mode = MetricMode::kMin;
};

// Note 004's EarlyStopping: an epoch counts as better when it beats the best by more than
// min_delta; training stops once `patience` epochs in a row have not.
class EarlyStopping {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options);
  bool step(double value);  // __call__: true means stop now
  double best_value() const { return best_value_; }
  int64_t best_epoch() const { return best_epoch_; }  // -1 before any better epoch

 private:
  EarlyStoppingOptions options_;
  int64_t counter_ = 0;
  int64_t epoch_ = -1;
  int64_t best_epoch_ = -1;
  double best_value_;
};

// "patience=10", "min_delta=0.001", "mode=max" (--early-stopping), into `options`.
Status set_early_stopping(EarlyStoppingOptions& options, std::string_view key_value);

}  // namespace trainfit
