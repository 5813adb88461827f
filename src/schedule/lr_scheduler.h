// PyTorch's learning-rate schedulers (torch.optim.lr_scheduler, as torch 1.13 writes them),
// replayed in double precision with the same arithmetic in the same order, so that every value
// equals PyTorch's: the recursive ("chainable") forms where PyTorch uses them, its closed forms
// where it does (SequentialLR's step(0) at a milestone), and its side effects on the optimizer's
// parameter groups at construction. Names follow PyTorch's, so the two read side by side.
//
//   Optimizer opt = Optimizer::with_lrs({0.1});
//   Result<std::unique_ptr<LRScheduler>> s =
//       make_lr_scheduler(*parse_scheduler_spec("StepLR(step_size=30)"), opt, {.steps = 90});
//   opt.param_groups[0].lr;    // lr for epoch 0
//   (*s)->step();              // lr for epoch 1 ...
//
// Note [exact arithmetic]: the file is compiled with -ffp-contract=off, so that no a*b+c is fused
// into one rounding where Python rounds twice.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "schedule/spec.h"

namespace trainfit {

// What a scheduler reads and writes in optimizer.param_groups[i].
struct ParamGroup {
  double lr = 0;
  std::optional<double> initial_lr;
  double max_lr = 0;  // OneCycleLR's
  double min_lr = 0;  // OneCycleLR's
};

struct Optimizer {
  std::vector<ParamGroup> param_groups;
  static Optimizer with_lrs(const std::vector<double>& lrs);
  std::vector<double> lrs() const;
};

// What a scheduler's defaults may depend on.
struct ScheduleContext {
  int64_t steps = 0;  // scheduler steps in the run: OneCycleLR's default total_steps
};

// torch.optim.lr_scheduler._LRScheduler.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // scheduler.step(); with an epoch, scheduler.step(epoch) as SequentialLR calls it at a
  // milestone. An error is what PyTorch would raise (stepping OneCycleLR past total_steps).
  virtual Status step(std::optional<int64_t> epoch = std::nullopt);
  Status initial_step();  // _initial_step: the step every constructor ends with
  const std::vector<double>& last_lr() const { return last_lr_; }

  int64_t last_epoch = -1;  // public in PyTorch too: SequentialLR rewinds it

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  virtual Result<std::vector<double>> get_lr() = 0;
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  std::vector<double> group_lrs() const { return optimizer_.lrs(); }
  void set_lrs(const std::vector<double>& lrs);

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;
};

// Builds a scheduler on `optimizer` as its constructor would (including its initial step).
// ReduceLROnPlateau is not one of these: see plateau.h.
Result<std::unique_ptr<LRScheduler>> make_lr_scheduler(const SchedulerSpec& spec,
                                                       Optimizer& optimizer,
                                                       const ScheduleContext& context);

// The schedulers make_lr_scheduler knows, with their keywords, for --help and errors.
struct SchedulerInfo {
  std::string name;
  std::string signature;  // "step_size, gamma=0.1"
  std::string summary;
};
std::vector<SchedulerInfo> known_schedulers();  // ReduceLROnPlateau included

}  // namespace trainfit
