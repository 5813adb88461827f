#include "schedule/lr_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/suggest.h"
#include "schedule/plateau.h"
#include "schedule/scheduler_args.h"

namespace trainfit {

Optimizer Optimizer::with_lrs(const std::vector<double>& lrs) {
  Optimizer o;
  for (double lr : lrs) o.param_groups.push_back({.lr = lr});
  return o;
}

std::vector<double> Optimizer::lrs() const {
  std::vector<double> out;
  for (const ParamGroup& g : param_groups) out.push_back(g.lr);
  return out;
}

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (ParamGroup& g : optimizer_.param_groups) {
    if (!g.initial_lr) g.initial_lr = g.lr;  // group.setdefault('initial_lr', group['lr'])
    base_lrs_.push_back(*g.initial_lr);
  }
}

Status LRScheduler::initial_step() {
  step_count_ = 0;
  return step();
}

Status LRScheduler::step(std::optional<int64_t> epoch) {
  ++step_count_;
  std::optional<std::vector<double>> values;
  if (!epoch) {
    ++last_epoch;
  } else {
    last_epoch = *epoch;
    values = closed_form_lr();
  }
  if (!values) {
    Result<std::vector<double>> lrs = get_lr();
    if (!lrs.ok()) return lrs.status();
    values = std::move(*lrs);
  }
  set_lrs(*values);
  last_lr_ = group_lrs();
  return {};
}

void LRScheduler::set_lrs(const std::vector<double>& lrs) {
  for (size_t i = 0; i < lrs.size(); ++i) optimizer_.param_groups[i].lr = lrs[i];
}

namespace {

constexpr double kPi = std::numbers::pi;  // math.pi

// Python's % on numbers: the result takes the divisor's sign.
double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& o, int64_t step_size, double gamma)
      : LRScheduler(o), step_size_(step_size), gamma_(gamma) {}

 private:
  Result<std::vector<double>> get_lr() override {
    std::vector<double> lrs = group_lrs();
    if (last_epoch == 0 || last_epoch % step_size_ != 0) return lrs;
    for (double& lr : lrs) lr = lr * gamma_;
    return lrs;
  }
  std::optional<std::vector<double>> closed_form_lr() const override {
    const int64_t decays = last_epoch / step_size_;  // Python's //; both are non-negative
    std::vector<double> lrs;
    for (double base : base_lrs_) {
      lrs.push_back(base * std::pow(gamma_, static_cast<double>(decays)));
    }
    return lrs;
  }
  int64_t step_size_;
  double gamma_;
};

class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& o, std::vector<int64_t> milestones, double gamma)
      : LRScheduler(o), milestones_(std::move(milestones)), gamma_(gamma) {}

 private:
  Result<std::vector<double>> get_lr() override {
    std::vector<double> lrs = group_lrs();
    auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch);
    if (count == 0) return lrs;
    for (double& lr : lrs) lr = lr * std::pow(gamma_, static_cast<double>(count));
    return lrs;
  }
  std::optional<std::vector<double>> closed_form_lr() const override {
    auto passed =
        std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch) - milestones_.begin();
    std::vector<double> lrs;
    for (double base : base_lrs_)
      lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
    return lrs;
  }
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

class ConstantLR final : public LRScheduler {
 public:
  ConstantLR(Optimizer& o, double factor, int64_t total_iters)
      : LRScheduler(o), factor_(factor), total_iters_(total_iters) {}

 private:
  Result<std::vector<double>> get_lr() override {
    std::vector<double> lrs = group_lrs();
    if (last_epoch == 0) {
      for (double& lr : lrs) lr = lr * factor_;
    } else if (last_epoch == total_iters_) {
      for (double& lr : lrs) lr = lr * (1.0 / factor_);
    }
    return lrs;
  }
  std::optional<std::vector<double>> closed_form_lr() const override {
    std::vector<double> lrs;
    double after = last_epoch >= total_iters_ ? 1.0 : 0.0;
    for (double base : base_lrs_) lrs.push_back(base * (factor_ + after * (1 - factor_)));
    return lrs;
  }
  double factor_;
  int64_t total_iters_;
};

class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& o, double start_factor, double end_factor, int64_t total_iters)
      : LRScheduler(o), start_(start_factor), end_(end_factor), total_iters_(total_iters) {}

 private:
  Result<std::vector<double>> get_lr() override {
    std::vector<double> lrs = group_lrs();
    if (last_epoch == 0) {
      for (double& lr : lrs) lr = lr * start_;
      return lrs;
    }
    if (last_epoch > total_iters_) return lrs;
    double denominator = static_cast<double>(total_iters_) * start_ +
                         static_cast<double>(last_epoch - 1) * (end_ - start_);
    for (double& lr : lrs) lr = lr * (1. + (end_ - start_) / denominator);
    return lrs;
  }
  std::optional<std::vector<double>> closed_form_lr() const override {
    std::vector<double> lrs;
    double done = static_cast<double>(std::min(total_iters_, last_epoch));
    for (double base : base_lrs_) {
      lrs.push_back(base * (start_ + (end_ - start_) * done / static_cast<double>(total_iters_)));
    }
    return lrs;
  }
  double start_, end_;
  int64_t total_iters_;
};

class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& o, double gamma) : LRScheduler(o), gamma_(gamma) {}

 private:
  Result<std::vector<double>> get_lr() override {
    std::vector<double> lrs = group_lrs();
    if (last_epoch == 0) return lrs;
    for (double& lr : lrs) lr = lr * gamma_;
    return lrs;
  }
  std::optional<std::vector<double>> closed_form_lr() const override {
    std::vector<double> lrs;
    for (double base : base_lrs_) {
      lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch)));
    }
    return lrs;
  }
  double gamma_;
};

class PolynomialLR final : public LRScheduler {
 public:
  PolynomialLR(Optimizer& o, int64_t total_iters, double power)
      : LRScheduler(o), total_iters_(total_iters), power_(power) {}

 private:
  Result<std::vector<double>> get_lr() override {
    std::vector<double> lrs = group_lrs();
    if (last_epoch == 0 || last_epoch > total_iters_) return lrs;
    double t = static_cast<double>(total_iters_);
    double decay = std::pow((1.0 - static_cast<double>(last_epoch) / t) /
                                (1.0 - static_cast<double>(last_epoch - 1) / t),
                            power_);
    for (double& lr : lrs) lr = lr * decay;
    return lrs;
  }
  std::optional<std::vector<double>> closed_form_lr() const override {
    std::vector<double> lrs;
    double t = static_cast<double>(total_iters_);
    double done = static_cast<double>(std::min(total_iters_, last_epoch));
    for (double base : base_lrs_) lrs.push_back(base * std::pow(1.0 - done / t, power_));
    return lrs;
  }
  int64_t total_iters_;
  double power_;
};

class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& o, double t_max, double eta_min)
      : LRScheduler(o), t_max_(t_max), eta_min_(eta_min) {}

 private:
  Result<std::vector<double>> get_lr() override {
    std::vector<double> lrs = group_lrs();
    double e = static_cast<double>(last_epoch);
    if (last_epoch == 0) return lrs;
    if (step_count_ == 1 && last_epoch > 0) {
      for (size_t i = 0; i < lrs.size(); ++i) {
        lrs[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * kPi / t_max_)) / 2;
      }
      return lrs;
    }
    if (py_mod(e - 1 - t_max_, 2 * t_max_) == 0) {
      for (size_t i = 0; i < lrs.size(); ++i) {
        lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(kPi / t_max_)) / 2;
      }
      return lrs;
    }
    for (double& lr : lrs) {
      lr = (1 + std::cos(kPi * e / t_max_)) / (1 + std::cos(kPi * (e - 1) / t_max_)) *
               (lr - eta_min_) +
           eta_min_;
    }
    return lrs;
  }
  std::optional<std::vector<double>> closed_form_lr() const override {
    std::vector<double> lrs;
    double e = static_cast<double>(last_epoch);
    for (double base : base_lrs_) {
      lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * e / t_max_)) / 2);
    }
    return lrs;
  }
  double t_max_, eta_min_;
};

class CosineAnnealingWarmRestarts final : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& o, int64_t t_0, int64_t t_mult, double eta_min)
      : LRScheduler(o), t_0_(t_0), t_i_(t_0), t_mult_(t_mult), eta_min_(eta_min) {}

  // Its own step: T_cur counts epochs since the last restart, T_i the current cycle's length.
  Status step(std::optional<int64_t> epoch) override {
    if (!epoch && last_epoch < 0) epoch = 0;
    if (!epoch) {
      epoch = last_epoch + 1;
      t_cur_ = t_cur_ + 1;
      if (t_cur_ >= static_cast<double>(t_i_)) {
        t_cur_ = t_cur_ - static_cast<double>(t_i_);
        if (t_i_ > (int64_t{1} << 50) / t_mult_) {
          return out_of_range("CosineAnnealingWarmRestarts: the cycle length T_i overflows",
                              "use a smaller T_mult");
        }
        t_i_ = t_i_ * t_mult_;
      }
    } else if (*epoch >= t_0_) {
      double ep = static_cast<double>(*epoch), t0 = static_cast<double>(t_0_);
      if (t_mult_ == 1) {
        t_cur_ = static_cast<double>(*epoch % t_0_);
      } else {
        double m = static_cast<double>(t_mult_);
        auto n = static_cast<int64_t>(std::log(ep / t0 * (m - 1) + 1) / std::log(m));
        double power = std::pow(m, static_cast<double>(n));
        t_cur_ = ep - t0 * (power - 1) / (m - 1);
        t_i_ = t_0_ * static_cast<int64_t>(power);
      }
    } else {
      t_i_ = t_0_;
      t_cur_ = static_cast<double>(*epoch);
    }
    last_epoch = *epoch;
    Result<std::vector<double>> lrs = get_lr();
    if (!lrs.ok()) return lrs.status();
    set_lrs(*lrs);
    last_lr_ = group_lrs();
    return {};
  }

 private:
  Result<std::vector<double>> get_lr() override {
    std::vector<double> lrs;
    for (double base : base_lrs_) {
      lrs.push_back(eta_min_ + (base - eta_min_) *
                                   (1 + std::cos(kPi * t_cur_ / static_cast<double>(t_i_))) / 2);
    }
    return lrs;
  }
  int64_t t_0_, t_i_, t_mult_;
  double eta_min_;
  double t_cur_ = -1;  // T_cur = last_epoch at construction
};

class OneCycleLR final : public LRScheduler {
 public:
  enum class Lr { kInitial, kMax, kMin };  // group['initial_lr'], ['max_lr'], ['min_lr']
  struct Phase {
    double end_step;
    Lr start_lr, end_lr;
  };
  // The groups' initial_lr, max_lr and min_lr are set before construction (make_one_cycle).
  OneCycleLR(Optimizer& o, int64_t total_steps, std::vector<Phase> phases, bool cosine)
      : LRScheduler(o), total_steps_(total_steps), phases_(std::move(phases)), cosine_(cosine) {}

 private:
  static double read(const ParamGroup& g, Lr which) {
    switch (which) {
      case Lr::kInitial:
        return *g.initial_lr;
      case Lr::kMax:
        return g.max_lr;
      case Lr::kMin:
        return g.min_lr;
    }
    return 0;
  }
  double anneal(double start, double end, double pct) const {
    if (cosine_) {
      double cos_out = std::cos(kPi * pct) + 1;
      return end + (start - end) / 2.0 * cos_out;
    }
    return (end - start) * pct + start;
  }
  Result<std::vector<double>> get_lr() override {
    if (last_epoch > total_steps_) {
      return invalid_argument(
          fmt::format("OneCycleLR is stepped {} times but total_steps is {}", last_epoch + 1,
                      total_steps_),
          "set total_steps to the steps the run takes (--epochs x --steps-per-epoch), or leave "
          "it out");
    }
    std::vector<double> lrs;
    double step_num = static_cast<double>(last_epoch);
    for (const ParamGroup& g : optimizer_.param_groups) {
      double start_step = 0;
      for (size_t i = 0; i < phases_.size(); ++i) {
        const Phase& phase = phases_[i];
        if (step_num <= phase.end_step || i == phases_.size() - 1) {
          if (phase.end_step == start_step) {
            return invalid_argument(
                fmt::format("OneCycleLR's phase {} has no steps: PyTorch divides by zero at "
                            "step {}",
                            i + 1, last_epoch),
                "raise pct_start or total_steps so that every phase has at least one step");
          }
          double pct = (step_num - start_step) / (phase.end_step - start_step);
          lrs.push_back(anneal(read(g, phase.start_lr), read(g, phase.end_lr), pct));
          break;
        }
        start_step = phase.end_step;
      }
    }
    return lrs;
  }
  int64_t total_steps_;
  std::vector<Phase> phases_;
  bool cosine_;
};

class CyclicLR final : public LRScheduler {
 public:
  enum class Mode { kTriangular, kTriangular2, kExpRange };
  CyclicLR(Optimizer& o, std::vector<double> base_lrs, std::vector<double> max_lrs,
           double step_size_up, double step_size_down, Mode mode, double gamma)
      : LRScheduler(o),
        given_base_lrs_(std::move(base_lrs)),
        max_lrs_(std::move(max_lrs)),
        total_size_(step_size_up + step_size_down),
        step_ratio_(step_size_up / total_size_),
        mode_(mode),
        gamma_(gamma) {}
  // After the initial step, which used the groups' initial_lr, PyTorch replaces base_lrs with
  // the base_lr it was given.
  void use_given_base_lrs() { base_lrs_ = given_base_lrs_; }

 private:
  double scale_fn(double x) const {
    switch (mode_) {
      case Mode::kTriangular:
        return 1.;
      case Mode::kTriangular2:
        return 1 / std::pow(2., x - 1);
      case Mode::kExpRange:
        return std::pow(gamma_, x);
    }
    return 1.;
  }
  Result<std::vector<double>> get_lr() override {
    double e = static_cast<double>(last_epoch);
    double cycle = std::floor(1 + e / total_size_);
    double x = 1. + e / total_size_ - cycle;
    double scale_factor = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
    std::vector<double> lrs;
    for (size_t i = 0; i < base_lrs_.size(); ++i) {
      double base_height = (max_lrs_[i] - base_lrs_[i]) * scale_factor;
      // triangular modes scale by cycle, exp_range by iteration
      double scale = mode_ == Mode::kExpRange ? scale_fn(e) : scale_fn(cycle);
      lrs.push_back(base_lrs_[i] + base_height * scale);
    }
    return lrs;
  }
  std::vector<double> given_base_lrs_, max_lrs_;
  double total_size_, step_ratio_;
  Mode mode_;
  double gamma_;
};

// Note 004's hand-written warm-up (an _LRScheduler subclass): base_lr * min(1, last_epoch /
// warmup_steps) until warmup_steps, then base_lr. It starts at 0.
class LinearWarmupScheduler final : public LRScheduler {
 public:
  LinearWarmupScheduler(Optimizer& o, int64_t warmup_steps)
      : LRScheduler(o), warmup_steps_(warmup_steps) {}

 private:
  Result<std::vector<double>> get_lr() override {
    if (last_epoch >= warmup_steps_) return base_lrs_;
    std::vector<double> lrs;
    double ratio =
        std::min(1.0, static_cast<double>(last_epoch) / static_cast<double>(warmup_steps_));
    for (double base : base_lrs_) lrs.push_back(base * ratio);
    return lrs;
  }
  int64_t warmup_steps_;
};

class SequentialLR final : public LRScheduler {
 public:
  // Rewinds the schedulers, each of which already took its initial step, and restarts the
  // first, as PyTorch's constructor does (it never calls _LRScheduler.__init__).
  SequentialLR(Optimizer& o, std::vector<std::unique_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones)
      : LRScheduler(o), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {}

  Status start() {
    last_epoch = -1 + 1;
    for (ParamGroup& g : optimizer_.param_groups) g.lr = *g.initial_lr;
    for (auto& s : schedulers_) s->last_epoch -= 1;
    Status st = schedulers_[0]->initial_step();
    last_lr_ = schedulers_[0]->last_lr();
    return st;
  }

  Status step(std::optional<int64_t> /*epoch*/) override {
    ++last_epoch;
    auto idx =
        std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch) - milestones_.begin();
    LRScheduler& s = *schedulers_[static_cast<size_t>(idx)];
    Status st =
        (idx > 0 && milestones_[static_cast<size_t>(idx) - 1] == last_epoch) ? s.step(0) : s.step();
    last_lr_ = s.last_lr();
    return st;
  }

 private:
  Result<std::vector<double>> get_lr() override { return group_lrs(); }
  std::vector<std::unique_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

class ChainedScheduler final : public LRScheduler {
 public:
  ChainedScheduler(Optimizer& o, std::vector<std::unique_ptr<LRScheduler>> schedulers)
      : LRScheduler(o), schedulers_(std::move(schedulers)) {
    last_lr_ = group_lrs();
  }
  Status step(std::optional<int64_t> /*epoch*/) override {
    for (auto& s : schedulers_) {
      Status st = s->step();
      if (!st.ok()) return st;
    }
    last_lr_ = group_lrs();
    return {};
  }

 private:
  Result<std::vector<double>> get_lr() override { return group_lrs(); }
  std::vector<std::unique_ptr<LRScheduler>> schedulers_;
};

// The registry: each scheduler's signature after the optimizer, and how it is built from it.
using Built = Result<std::unique_ptr<LRScheduler>>;
using Build = Built (*)(const SchedulerArgs&, Optimizer&, const ScheduleContext&);

struct SchedulerEntry {
  const char* name;
  std::vector<SchedulerParam> signature;  // after the optimizer; last_epoch and verbose added
  const char* summary;
  Build build;
};

Status impossible(const SchedulerArgs& a, std::string message, std::string hint) {
  return invalid_argument(fmt::format("{}: {}", a.scheduler(), message), std::move(hint));
}

// Runs the constructor's initial step, as _LRScheduler.__init__ ends.
Built started(std::unique_ptr<LRScheduler> s) {
  Status st = s->initial_step();
  if (!st.ok()) return st;
  return s;
}

Status increasing(const SchedulerArgs& a, const std::vector<int64_t>& milestones) {
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] < 0 || (i > 0 && milestones[i] <= milestones[i - 1])) {
      return impossible(a,
                        fmt::format("milestones [{}] do not increase", fmt::join(milestones, ", ")),
                        "list each milestone once, smallest first, from 0");
    }
  }
  return {};
}

Built build_step(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto step_size, a.integer("step_size"));
  TF_ASSIGN_OR_RETURN(auto gamma, a.number("gamma"));
  if (step_size < 1) {
    return impossible(a, fmt::format("step_size={} is below 1", step_size),
                      "step_size is the epochs (or steps) between decays, at least 1");
  }
  return started(std::make_unique<StepLR>(o, step_size, gamma));
}

Built build_multi_step(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto milestones, a.integers("milestones"));
  TF_ASSIGN_OR_RETURN(auto gamma, a.number("gamma"));
  TF_RETURN_IF_ERROR(increasing(a, milestones));
  return started(std::make_unique<MultiStepLR>(o, milestones, gamma));
}

Built build_constant(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto factor, a.number("factor"));
  TF_ASSIGN_OR_RETURN(auto total_iters, a.integer("total_iters"));
  if (factor <= 0 || factor > 1) {
    return impossible(a, fmt::format("factor={} is outside (0, 1]", factor),
                      "PyTorch multiplies by 1/factor at total_iters; give a factor above 0");
  }
  return started(std::make_unique<ConstantLR>(o, factor, total_iters));
}

Built build_linear(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto start, a.number("start_factor"));
  TF_ASSIGN_OR_RETURN(auto end, a.number("end_factor"));
  TF_ASSIGN_OR_RETURN(auto total_iters, a.integer("total_iters"));
  if (start <= 0 || start > 1 || end < 0 || end > 1) {
    return impossible(
        a, fmt::format("start_factor={} or end_factor={} is outside its range", start, end),
        "start_factor in (0, 1], end_factor in [0, 1]");
  }
  if (total_iters < 1) {
    return impossible(a, fmt::format("total_iters={} is below 1", total_iters),
                      "total_iters is the steps the ramp takes");
  }
  return started(std::make_unique<LinearLR>(o, start, end, total_iters));
}

Built build_exponential(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto gamma, a.number("gamma"));
  return started(std::make_unique<ExponentialLR>(o, gamma));
}

Built build_polynomial(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto total_iters, a.integer("total_iters"));
  TF_ASSIGN_OR_RETURN(auto power, a.number("power"));
  if (total_iters < 1) {
    return impossible(a, fmt::format("total_iters={} is below 1", total_iters),
                      "PyTorch divides by total_iters");
  }
  return started(std::make_unique<PolynomialLR>(o, total_iters, power));
}

Built build_cosine(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto t_max, a.number("T_max"));
  TF_ASSIGN_OR_RETURN(auto eta_min, a.number("eta_min"));
  if (t_max <= 0) {
    return impossible(a, fmt::format("T_max={} is not positive", t_max),
                      "T_max is the epochs (or steps) of half a cosine period, usually the run's");
  }
  return started(std::make_unique<CosineAnnealingLR>(o, t_max, eta_min));
}

Built build_warm_restarts(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto t_0, a.integer("T_0"));
  TF_ASSIGN_OR_RETURN(auto t_mult, a.integer("T_mult"));
  TF_ASSIGN_OR_RETURN(auto eta_min, a.number("eta_min"));
  if (t_0 < 1) {
    return impossible(a, fmt::format("T_0={} is not a positive integer", t_0),
                      "T_0 is the length of the first cycle, at least 1");
  }
  if (t_mult < 1) {
    return impossible(a, fmt::format("T_mult={} is below 1", t_mult),
                      "T_mult multiplies each cycle's length: 1 keeps them equal");
  }
  return started(std::make_unique<CosineAnnealingWarmRestarts>(o, t_0, t_mult, eta_min));
}

Built build_one_cycle(const SchedulerArgs& a, Optimizer& o, const ScheduleContext& context) {
  size_t groups = o.param_groups.size();
  TF_ASSIGN_OR_RETURN(auto max_lrs, a.per_group("max_lr", groups));
  int64_t total_steps = context.steps;
  if (!a.is_none("total_steps")) {
    TF_ASSIGN_OR_RETURN(auto given, a.integer("total_steps"));
    total_steps = given;
  } else if (!a.is_none("epochs") || !a.is_none("steps_per_epoch")) {
    if (a.is_none("epochs") || a.is_none("steps_per_epoch")) {
      return impossible(a, "epochs is given without steps_per_epoch, or the other way round",
                        "give both, or total_steps");
    }
    TF_ASSIGN_OR_RETURN(auto epochs, a.integer("epochs"));
    TF_ASSIGN_OR_RETURN(auto steps_per_epoch, a.integer("steps_per_epoch"));
    if (epochs < 1 || steps_per_epoch < 1) {
      return impossible(a, "epochs and steps_per_epoch must be positive", "give both at least 1");
    }
    total_steps = epochs * steps_per_epoch;
  }
  if (total_steps < 1) {
    return impossible(a, fmt::format("total_steps={} is not positive", total_steps),
                      "total_steps is the steps of the whole cycle");
  }
  TF_ASSIGN_OR_RETURN(auto pct_start, a.number("pct_start"));
  TF_ASSIGN_OR_RETURN(auto strategy, a.word("anneal_strategy", {"cos", "linear"}));
  TF_ASSIGN_OR_RETURN(auto div_factor, a.number("div_factor"));
  TF_ASSIGN_OR_RETURN(auto final_div_factor, a.number("final_div_factor"));
  TF_ASSIGN_OR_RETURN(auto three_phase, a.boolean("three_phase"));
  if (pct_start < 0 || pct_start > 1) {
    return impossible(a, fmt::format("pct_start={} is outside [0, 1]", pct_start),
                      "pct_start is the share of the cycle spent rising");
  }
  if (div_factor == 0 || final_div_factor == 0) {
    return impossible(a, "div_factor and final_div_factor divide the learning rate",
                      "give them non-zero");
  }
  using L = OneCycleLR::Lr;
  auto t = static_cast<double>(total_steps);
  std::vector<OneCycleLR::Phase> phases;
  if (three_phase) {
    phases = {{pct_start * t - 1, L::kInitial, L::kMax},
              {2 * pct_start * t - 2, L::kMax, L::kInitial},
              {t - 1, L::kInitial, L::kMin}};
  } else {
    phases = {{pct_start * t - 1, L::kInitial, L::kMax}, {t - 1, L::kMax, L::kMin}};
  }
  for (size_t i = 0; i < groups; ++i) {
    ParamGroup& g = o.param_groups[i];
    g.initial_lr = max_lrs[i] / div_factor;
    g.max_lr = max_lrs[i];
    g.min_lr = *g.initial_lr / final_div_factor;
  }
  return started(std::make_unique<OneCycleLR>(o, total_steps, phases, strategy == "cos"));
}

Built build_cyclic(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  size_t groups = o.param_groups.size();
  TF_ASSIGN_OR_RETURN(auto base_lrs, a.per_group("base_lr", groups));
  TF_ASSIGN_OR_RETURN(auto max_lrs, a.per_group("max_lr", groups));
  TF_ASSIGN_OR_RETURN(auto up, a.number("step_size_up"));
  double down = up;
  if (!a.is_none("step_size_down")) {
    TF_ASSIGN_OR_RETURN(auto given, a.number("step_size_down"));
    down = given;
  }
  TF_ASSIGN_OR_RETURN(auto mode, a.word("mode", {"triangular", "triangular2", "exp_range"}));
  TF_ASSIGN_OR_RETURN(auto gamma, a.number("gamma"));
  if (up <= 0 || down < 0) {
    return impossible(a, "step_size_up must be positive and step_size_down not negative",
                      "they are the steps of the rising and falling halves of a cycle");
  }
  using M = CyclicLR::Mode;
  M m = mode == "triangular"    ? M::kTriangular
        : mode == "triangular2" ? M::kTriangular2
                                : M::kExpRange;
  for (size_t i = 0; i < groups; ++i) o.param_groups[i].lr = base_lrs[i];
  auto s = std::make_unique<CyclicLR>(o, base_lrs, max_lrs, up, down, m, gamma);
  TF_RETURN_IF_ERROR(s->initial_step());
  s->use_given_base_lrs();
  return std::unique_ptr<LRScheduler>(std::move(s));
}

Built build_warmup(const SchedulerArgs& a, Optimizer& o, const ScheduleContext&) {
  TF_ASSIGN_OR_RETURN(auto warmup_steps, a.integer("warmup_steps"));
  if (warmup_steps < 0) {
    return impossible(a, fmt::format("warmup_steps={} is negative", warmup_steps),
                      "warmup_steps is the steps the ramp from 0 takes");
  }
  return started(std::make_unique<LinearWarmupScheduler>(o, warmup_steps));
}

Result<std::vector<std::unique_ptr<LRScheduler>>> build_all(const SchedulerArgs& a, Optimizer& o,
                                                            const ScheduleContext& context) {
  TF_ASSIGN_OR_RETURN(auto specs, a.calls("schedulers"));
  std::vector<std::unique_ptr<LRScheduler>> out;
  for (const SchedulerSpec& spec : specs) {
    Built s = make_lr_scheduler(spec, o, context);
    if (!s.ok()) return s.status();
    out.push_back(std::move(*s));
  }
  return out;
}

Built build_sequential(const SchedulerArgs& a, Optimizer& o, const ScheduleContext& context) {
  TF_ASSIGN_OR_RETURN(auto milestones, a.integers("milestones"));
  TF_RETURN_IF_ERROR(increasing(a, milestones));
  auto schedulers = build_all(a, o, context);
  if (!schedulers.ok()) return schedulers.status();
  if (milestones.size() + 1 != schedulers->size()) {
    return impossible(a,
                      fmt::format("{} schedulers need {} milestones, {} given", schedulers->size(),
                                  schedulers->size() - 1, milestones.size()),
                      "milestone i is the step at which scheduler i+1 takes over");
  }
  auto s = std::make_unique<SequentialLR>(o, std::move(*schedulers), milestones);
  TF_RETURN_IF_ERROR(s->start());
  return std::unique_ptr<LRScheduler>(std::move(s));
}

Built build_chained(const SchedulerArgs& a, Optimizer& o, const ScheduleContext& context) {
  auto schedulers = build_all(a, o, context);
  if (!schedulers.ok()) return schedulers.status();
  return std::unique_ptr<LRScheduler>(
      std::make_unique<ChainedScheduler>(o, std::move(*schedulers)));
}

const std::vector<SchedulerEntry>& entries() {
  static const std::vector<SchedulerEntry> kEntries = {
      {"StepLR",
       {{"step_size"}, {"gamma", "0.1"}},
       "multiply by gamma every step_size",
       build_step},
      {"MultiStepLR",
       {{"milestones"}, {"gamma", "0.1"}},
       "multiply by gamma at each milestone",
       build_multi_step},
      {"ConstantLR",
       {{"factor", "0.3333333333333333"}, {"total_iters", "5"}},
       "factor x lr until total_iters, then lr",
       build_constant},
      {"LinearLR",
       {{"start_factor", "0.3333333333333333"}, {"end_factor", "1.0"}, {"total_iters", "5"}},
       "linear from start_factor x lr to end_factor x lr over total_iters",
       build_linear},
      {"ExponentialLR", {{"gamma"}}, "multiply by gamma every step", build_exponential},
      {"PolynomialLR",
       {{"total_iters", "5"}, {"power", "1.0"}},
       "(1 - t/total_iters)^power decay to 0",
       build_polynomial},
      {"CosineAnnealingLR",
       {{"T_max"}, {"eta_min", "0"}},
       "cosine from lr down to eta_min over T_max",
       build_cosine},
      {"CosineAnnealingWarmRestarts",
       {{"T_0"}, {"T_mult", "1"}, {"eta_min", "0"}},
       "cosine restarted every cycle, cycles T_0, T_0*T_mult, ...",
       build_warm_restarts},
      {"OneCycleLR",
       {{"max_lr"},
        {"total_steps", "None"},
        {"epochs", "None"},
        {"steps_per_epoch", "None"},
        {"pct_start", "0.3"},
        {"anneal_strategy", "'cos'"},
        {"cycle_momentum", "True"},
        {"base_momentum", "0.85"},
        {"max_momentum", "0.95"},
        {"div_factor", "25.0"},
        {"final_div_factor", "10000.0"},
        {"three_phase", "False"}},
       "up to max_lr, then down to max_lr/div_factor/final_div_factor; total_steps defaults to "
       "the run's steps",
       build_one_cycle},
      {"CyclicLR",
       {{"base_lr"},
        {"max_lr"},
        {"step_size_up", "2000"},
        {"step_size_down", "None"},
        {"mode", "'triangular'"},
        {"gamma", "1.0"},
        {"scale_fn", "None"},
        {"scale_mode", "'cycle'"},
        {"cycle_momentum", "True"},
        {"base_momentum", "0.8"},
        {"max_momentum", "0.9"}},
       "triangle waves between base_lr and max_lr",
       build_cyclic},
      {"SequentialLR",
       {{"schedulers"}, {"milestones"}},
       "one scheduler after another, switching at the milestones",
       build_sequential},
      {"ChainedScheduler",
       {{"schedulers"}},
       "every scheduler stepped together, effects multiplied",
       build_chained},
      {"LinearWarmupScheduler",
       {{"warmup_steps"}},
       "note 004's warm-up: base_lr * min(1, step/warmup_steps), from 0",
       build_warmup},
  };
  return kEntries;
}

std::string signature_text(const std::vector<SchedulerParam>& params) {
  std::vector<std::string> parts;
  parts.reserve(params.size());
  for (const SchedulerParam& p : params) {
    parts.push_back(p.default_value ? fmt::format("{}={}", p.name, *p.default_value) : p.name);
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

Result<std::unique_ptr<LRScheduler>> make_lr_scheduler(const SchedulerSpec& spec,
                                                       Optimizer& optimizer,
                                                       const ScheduleContext& context) {
  std::vector<std::string> names;
  for (const SchedulerEntry& e : entries()) {
    if (e.name != spec.name) {
      names.emplace_back(e.name);
      continue;
    }
    std::vector<SchedulerParam> signature = e.signature;
    signature.push_back({"last_epoch", "-1"});
    signature.push_back({"verbose", "False"});
    Result<SchedulerArgs> args = SchedulerArgs::bind(spec, signature);
    if (!args.ok()) return args.status();
    Result<int64_t> last_epoch = args->integer("last_epoch");
    if (!last_epoch.ok()) return last_epoch.status();
    if (*last_epoch != -1) {
      return unsupported(fmt::format("{}: last_epoch={} resumes a run", spec.name, *last_epoch),
                         "leave last_epoch out: the schedule is shown from its start");
    }
    if (spec.name == "CyclicLR" && !args->is_none("scale_fn")) {
      return unsupported("CyclicLR: a custom scale_fn is Python code",
                         "use mode='triangular', 'triangular2' or 'exp_range'");
    }
    return e.build(*args, optimizer, context);
  }
  if (spec.name == kReduceLROnPlateau) {
    return invalid_argument("ReduceLROnPlateau cannot be nested in another scheduler",
                            "give it alone, with --metrics FILE.csv");
  }
  names.emplace_back(kReduceLROnPlateau);
  std::string near = closest(spec.name, names);
  return not_found(fmt::format("unknown scheduler '{}'", spec.name),
                   near.empty() ? "see trainfit schedule --help for the list"
                                : fmt::format("did you mean {}?", near));
}

std::vector<SchedulerInfo> known_schedulers() {
  std::vector<SchedulerInfo> out;
  for (const SchedulerEntry& e : entries()) {
    out.push_back({e.name, signature_text(e.signature), e.summary});
  }
  out.push_back({std::string(kReduceLROnPlateau), signature_text(plateau_signature()),
                 "divide by 1/factor when the --metrics curve stops improving"});
  return out;
}

}  // namespace trainfit
