#include "plan/target.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace trainfit {
namespace {

// Knobs grouped into slots: one slot per exclusive group (at most one of its knobs on) and one
// per other knob. A combination picks an option index per slot, -1 for none.
struct Option {
  const Knob* knob = nullptr;
  int64_t device_used = 0;  // with this knob alone, at the target batch
  double step_change = 0;   // with this knob alone, over the request at the target batch
};
using Combination = std::vector<int>;

class TargetSearch {
 public:
  TargetSearch(Estimator& estimator, TrainingRequest at, std::vector<std::vector<Option>> slots,
               Rank rank)
      : estimator_(estimator), at_(std::move(at)), slots_(std::move(slots)), rank_(rank) {}

  // The combination that turns on, per slot, the option saving the most among those no more
  // intrusive than `kind`.
  Combination strongest(KnobKind kind) const {
    Combination c(slots_.size(), -1);
    for (size_t s = 0; s < slots_.size(); ++s) {
      for (size_t o = 0; o < slots_[s].size(); ++o) {
        if (slots_[s][o].knob->kind <= kind) {
          c[s] = static_cast<int>(o);
          break;  // options are ordered by their device use, smallest first
        }
      }
    }
    return c;
  }

  // Every combination whose most intrusive knob is `kind`, cheapest first: least recompute (or
  // step time), then fewest knobs.
  std::vector<Combination> candidates(KnobKind kind) const {
    std::vector<Combination> all{Combination{}};
    for (const std::vector<Option>& slot : slots_) {
      std::vector<Combination> next;
      for (const Combination& c : all) {
        for (int o = -1; o < static_cast<int>(slot.size()); ++o) {
          if (o >= 0 && slot[static_cast<size_t>(o)].knob->kind > kind) continue;
          Combination longer = c;
          longer.push_back(o);
          next.push_back(std::move(longer));
        }
      }
      all = std::move(next);
    }
    std::erase_if(all,
                  [&](const Combination& c) { return count(c) == 0 || most_intrusive(c) != kind; });
    std::stable_sort(all.begin(), all.end(), [&](const Combination& a, const Combination& b) {
      const double ra = cost(a);
      const double rb = cost(b);
      if (ra != rb) return ra < rb;
      return count(a) < count(b);
    });
    return all;
  }

  std::vector<const Knob*> knobs(const Combination& c) const {
    std::vector<const Knob*> on;
    for (size_t s = 0; s < c.size(); ++s) {
      if (c[s] >= 0) on.push_back(slots_[s][static_cast<size_t>(c[s])].knob);
    }
    return on;
  }

  enum class Outcome : uint8_t { kFits, kTooLarge, kRejected };

  // The combination at the target batch. The model may reject a combination whose knobs
  // conflict (checkpointing the VAE encoder once there is no VAE): that is not a failure to fit.
  Outcome attempt(const Combination& c) {
    ++tried_;
    Result<Estimate> e = estimator_.estimate(with_knobs(at_, knobs(c)),
                                             {.peak_after_oom = false, .step_time = false});
    if (!e.ok()) return Outcome::kRejected;
    if (!e->fits) {
      failed_.push_back(c);
      return Outcome::kTooLarge;
    }
    return Outcome::kFits;
  }

  // The strongest combination up to `kind` that the model accepts: while it rejects one, the
  // knob whose removal it accepts is dropped, the latest slot first.
  std::pair<Combination, Outcome> strongest_accepted(KnobKind kind) {
    Combination c = strongest(kind);
    Outcome o = attempt(c);
    while (o == Outcome::kRejected) {
      bool dropped = false;
      for (size_t s = c.size(); s-- > 0 && !dropped;) {
        if (c[s] < 0) continue;
        Combination fewer = c;
        fewer[s] = -1;
        const Outcome f = attempt(fewer);
        if (f != Outcome::kRejected) {
          c = std::move(fewer);
          o = f;
          dropped = true;
        }
      }
      if (!dropped) break;
    }
    return {c, o};
  }

  // Turning knobs off does not make a failing combination fit: skip what a failure covers.
  bool covered_by_failure(const Combination& c) const {
    return std::any_of(failed_.begin(), failed_.end(), [&](const Combination& f) {
      for (size_t s = 0; s < c.size(); ++s) {
        if (c[s] >= 0 && c[s] != f[s]) return false;
      }
      return true;
    });
  }

  int tried() const { return tried_; }

 private:
  KnobKind most_intrusive(const Combination& c) const {
    KnobKind k = KnobKind::kFree;
    for (const Knob* knob : knobs(c)) k = std::max(k, knob->kind);
    return k;
  }
  // What the rank minimizes: the knobs' recompute, or their step-time changes alone added up.
  double cost(const Combination& c) const {
    double r = 0;
    for (size_t s = 0; s < c.size(); ++s) {
      if (c[s] < 0) continue;
      const Option& o = slots_[s][static_cast<size_t>(c[s])];
      r += rank_ == Rank::kTime ? o.step_change : o.knob->recompute;
    }
    return r;
  }
  static int count(const Combination& c) {
    return static_cast<int>(std::count_if(c.begin(), c.end(), [](int o) { return o >= 0; }));
  }

  Estimator& estimator_;
  TrainingRequest at_;
  std::vector<std::vector<Option>> slots_;
  Rank rank_;
  std::vector<Combination> failed_;
  int tried_ = 0;
};

// Combinations tried within the cheapest fitting kind before settling for its strongest one.
constexpr int kMaxCombinations = 400;

Status accumulation_plan(Estimator& estimator, const TrainingRequest& request, TargetPlan& plan) {
  // Accumulating keeps the gradients alive through the next micro-batch's backward, so the
  // micro-batch is searched with accumulation on.
  TrainingRequest acc = request;
  acc.grad_accum = 2;
  BatchSearch search(estimator, acc);
  TF_ASSIGN_OR_RETURN(const BatchFit fit, search.fit(acc.device, *acc.margin));
  plan.combinations_tried += search.estimates();
  const int64_t m = std::min(fit.max_batch, plan.target);
  if (m == 0) return {};
  const int64_t target = plan.target;
  int64_t steps = (target + m - 1) / m;
  int64_t micro = (target + steps - 1) / steps;
  for (int64_t k = steps; k <= 2 * steps; ++k) {
    if (target % k == 0 && target / k <= m) {  // an exact split, if one is near
      steps = k;
      micro = target / k;
      break;
    }
  }
  plan.micro_batch = micro;
  plan.accumulation = steps;
  plan.effective_batch = micro * steps;
  if (steps > kMaxPlannedAccumulation) return {};  // said so, not estimated
  acc.batch = micro;
  acc.grad_accum = static_cast<int>(steps);
  TF_ASSIGN_OR_RETURN(plan.estimate, estimator.estimate(acc));
  plan.request = acc;
  plan.accumulation_estimated = true;
  return {};
}

}  // namespace

Result<TargetPlan> plan_target(Estimator& estimator, const TrainingRequest& request,
                               const std::vector<Knob>& knobs, int64_t target,
                               bool allow_model_changes, Rank rank) {
  TF_CHECK(request.margin.has_value()) << "plan_target needs the margin fit uses";
  if (target < 1) {
    return invalid_argument(fmt::format("--target-batch must be at least 1, got {}", target),
                            "for example --target-batch 64");
  }
  TargetPlan plan;
  plan.target = target;
  TrainingRequest at = request;
  at.batch = target;
  TF_ASSIGN_OR_RETURN(Estimate as_given, estimator.estimate(at));
  plan.combinations_tried = 1;
  plan.as_given = as_given;
  if (as_given.fits) {
    plan.fits = true;
    plan.request = at;
    plan.estimate = std::move(as_given);
    return plan;
  }
  // Each knob alone at the target batch orders the options of its slot.
  std::vector<std::vector<Option>> slots;
  std::vector<std::string> groups;
  std::vector<const Knob*> offered;
  for (const Knob& k : knobs) {
    if (k.kind != KnobKind::kModel || allow_model_changes) offered.push_back(&k);
  }
  std::vector<Result<Estimate>> alone_estimates(offered.size(), Estimate{});
  parallel_estimates(estimator, offered.size(), [&](Estimator& mine, size_t i) {
    alone_estimates[i] = mine.estimate(with_knobs(at, {offered[i]}));
  });
  for (size_t i = 0; i < offered.size(); ++i) {
    const Knob& k = *offered[i];
    const Result<Estimate>& alone = alone_estimates[i];
    ++plan.combinations_tried;
    if (!alone.ok()) continue;
    const Option option{&k, alone->device_used_bytes, step_change(*alone, as_given).value_or(0)};
    const auto group = std::find(groups.begin(), groups.end(), k.group);
    if (!k.group.empty() && group != groups.end()) {
      std::vector<Option>& slot = slots[static_cast<size_t>(group - groups.begin())];
      slot.insert(std::upper_bound(slot.begin(), slot.end(), option,
                                   [](const Option& a, const Option& b) {
                                     return a.device_used < b.device_used;
                                   }),
                  option);
    } else {
      slots.push_back({option});
      groups.push_back(k.group);
    }
  }
  TargetSearch search(estimator, at, std::move(slots), rank);
  std::optional<KnobKind> cheapest;
  Combination chosen;
  Combination previous;
  for (KnobKind kind : {KnobKind::kFree, KnobKind::kPrecision, KnobKind::kRecompute,
                        KnobKind::kRecipe, KnobKind::kModel}) {
    if (search.strongest(kind) == previous) continue;  // no knob of this kind: already tried
    previous = search.strongest(kind);
    auto [combination, outcome] = search.strongest_accepted(kind);
    if (outcome == TargetSearch::Outcome::kFits) {
      cheapest = kind;
      chosen = std::move(combination);
      break;
    }
  }
  if (!cheapest) {
    plan.combinations_tried += search.tried();
    TF_RETURN_IF_ERROR(accumulation_plan(estimator, request, plan));
    if (plan.micro_batch > 0) plan.step_change = step_change(plan.estimate, plan.as_given);
    return plan;
  }
  for (const Combination& c : search.candidates(*cheapest)) {
    if (search.tried() >= kMaxCombinations) break;
    if (search.covered_by_failure(c)) continue;
    if (search.attempt(c) == TargetSearch::Outcome::kFits) {
      chosen = c;
      break;
    }
  }
  plan.combinations_tried += search.tried();
  plan.fits = true;
  for (const Knob* k : search.knobs(chosen)) plan.knobs.push_back(*k);
  plan.request = with_knobs(at, search.knobs(chosen));
  TF_ASSIGN_OR_RETURN(plan.estimate, estimator.estimate(plan.request));
  plan.step_change = step_change(plan.estimate, plan.as_given);
  return plan;
}

}  // namespace trainfit
