#include "cli/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "graph/builder.h"
#include "lower/flops.h"
#include "lower/lowering.h"

namespace trainfit {

// ---- batch search ---------------------------------------------------------------------------

Result<BatchSearch> BatchSearch::create(const EstimateFlags& flags) {
  EstimateFlags base = flags;
  base.device.gpu.clear();
  base.device.gpu_memory.clear();
  base.device.margin.clear();
  BatchSearch s;
  TF_ASSIGN_OR_RETURN(s.base_, resolve_flags(base));
  return s;
}

Result<BatchSearch::Probe> BatchSearch::run(const DeviceProfile& device, int64_t batch) {
  if (base_.trace) {
    ResolvedEstimate r = base_;
    r.request.batch = batch;
    r.options.device = device;
    r.options.peak_after_oom = false;
    ++estimates_;
    TF_ASSIGN_OR_RETURN(const Estimate e, run_resolved(r));
    return Probe{e.peak_allocated_bytes, e.peak_reserved_bytes, e.device_used_bytes,
                 e.num_alloc_retries, e.fits};
  }
  if (!graph_ || graph_batch_ != batch) {
    ModelRequest request = base_.request;
    request.batch = batch;
    graph_.reset();
    TF_ASSIGN_OR_RETURN(graph_, build_model(request));
    graph_batch_ = batch;
  }
  EstimateOptions options = base_.options;
  options.device = device;
  options.peak_after_oom = false;  // a probe that runs out only needs to say so
  ++estimates_;
  TF_ASSIGN_OR_RETURN(const Estimate e, estimate(*graph_, options));
  return Probe{e.peak_allocated_bytes, e.peak_reserved_bytes, e.device_used_bytes,
               e.num_alloc_retries, e.fits};
}

Result<BatchSearch::Probe> BatchSearch::unbounded(const DeviceProfile& device, int64_t batch) {
  const auto key = std::make_tuple(device.cublas_workspace_bytes, device.context_bytes, batch);
  if (auto it = unbounded_.find(key); it != unbounded_.end()) return it->second;
  DeviceProfile open = device;
  open.total_bytes = -1;
  open.margin_bytes = 0;
  TF_ASSIGN_OR_RETURN(const Probe p, run(open, batch));
  unbounded_.emplace(key, p);
  return p;
}

Result<bool> BatchSearch::fits(const DeviceProfile& device, int64_t batch) {
  const int64_t budget = device.total_bytes - device.margin_bytes;
  TF_ASSIGN_OR_RETURN(const Probe open, unbounded(device, batch));
  // The allocator never reaches the limit: the bounded run would be the same.
  if (open.device_used <= budget) return true;
  // Live tensors alone exceed it: no freeing of cached blocks helps.
  if (open.allocated + device.context_bytes > budget) return false;
  const auto key =
      std::make_tuple(device.cublas_workspace_bytes, device.context_bytes, budget, batch);
  auto it = bounded_.find(key);
  if (it == bounded_.end()) {
    TF_ASSIGN_OR_RETURN(const Probe p, run(device, batch));
    it = bounded_.emplace(key, p).first;
  }
  return it->second.fits;
}

Result<BatchFit> BatchSearch::fit(const DeviceProfile& device) {
  TF_CHECK(device.total_bytes >= 0) << "fit needs a device with known memory";
  BatchFit result;
  const int64_t budget = device.total_bytes - device.margin_bytes;
  result.budget_bytes = budget;
  // Invariant: lo fits (0 trivially), hi does not (kMaxSearchBatch + 1 by assumption). What
  // earlier searches on this device class settled seeds the bracket.
  int64_t lo = 0;
  int64_t hi = kMaxSearchBatch + 1;
  const auto first = [&] {
    return unbounded_.lower_bound(
        std::make_tuple(device.cublas_workspace_bytes, device.context_bytes, int64_t{0}));
  };
  const auto same_class = [&](const auto& it) {
    return it != unbounded_.end() && std::get<0>(it->first) == device.cublas_workspace_bytes &&
           std::get<1>(it->first) == device.context_bytes;
  };
  for (auto it = first(); same_class(it); ++it) {
    if (it->second.device_used <= budget) lo = std::max(lo, std::get<2>(it->first));
  }
  for (auto it = first(); same_class(it); ++it) {
    const int64_t batch = std::get<2>(it->first);
    if (batch > lo && it->second.allocated + device.context_bytes > budget) {
      hi = std::min(hi, batch);
    }
  }
  // Device use is close to affine in the batch: the next probe is where the line through the
  // bracket's ends (or, before there is an upper end, the last two probes) crosses the budget.
  // Allocator rounding bends the line, so every guess is checked, and each probe
  // from the fourth inside a bracket bisects, so that a bent curve cannot stall the search.
  // Guidance only (every guess is checked): a batch not yet probed on this device class takes
  // its value from another class, whose curve differs by a constant workspace.
  const auto used = [&](int64_t batch) -> std::optional<double> {
    auto it = unbounded_.find(
        std::make_tuple(device.cublas_workspace_bytes, device.context_bytes, batch));
    if (it == unbounded_.end()) {
      it = std::find_if(unbounded_.begin(), unbounded_.end(),
                        [&](const auto& e) { return std::get<2>(e.first) == batch; });
    }
    if (it == unbounded_.end()) return std::nullopt;
    return static_cast<double>(it->second.device_used);
  };
  const auto crossing = [&](int64_t b1, int64_t b2) -> std::optional<int64_t> {
    const std::optional<double> d1 = used(b1);
    const std::optional<double> d2 = used(b2);
    if (!d1 || !d2 || b1 == b2 || *d2 <= *d1) return std::nullopt;
    const double slope = (*d2 - *d1) / static_cast<double>(b2 - b1);
    const double cross = static_cast<double>(b1) + (static_cast<double>(budget) - *d1) / slope;
    return static_cast<int64_t>(
        std::floor(std::clamp(cross, 0.0, static_cast<double>(kMaxSearchBatch))));
  };
  int64_t last = 0;
  int bracketed_steps = 0;
  int64_t past_lo = 1;
  while (hi - lo > 1) {
    int64_t guess = 0;
    const bool bracketed = hi <= kMaxSearchBatch;
    if (lo == 0 && !used(1)) {
      guess = 1;
    } else if (bracketed && bracketed_steps >= 3) {
      guess = lo + (hi - lo) / 2;
    } else if (bracketed) {
      guess = crossing(lo == 0 ? 1 : lo, hi).value_or(lo + (hi - lo) / 2);
      if (guess == lo && last == lo) guess = lo + 1;  // just found lo: try the next one
    } else {
      // Above every probe so far: extrapolate along the longest baseline, from batch 1 to the
      // largest probe of any class (nearby probes differ by allocator rounding as much as by
      // the batch).
      int64_t largest = 0;
      for (const auto& [key, probe] : unbounded_) largest = std::max(largest, std::get<2>(key));
      const std::optional<int64_t> c = largest > 1 ? crossing(1, largest) : std::nullopt;
      guess = lo == 0 ? c.value_or(1) : std::min(c.value_or(lo * 16), lo * 16);
      // The long baseline can put the crossing at or below a batch that fits (its slope is
      // an average): step past lo by 1, 2, 4, ... so that a limit far above is bracketed in
      // a few probes rather than approached one batch at a time.
      if (lo > 0 && guess <= lo) {
        guess = lo + past_lo;
        past_lo *= 2;
      }
    }
    const int64_t batch = std::clamp(guess, lo + 1, hi - 1);
    Result<bool> ok = fits(device, batch);
    if (!ok.ok()) {
      // The same configuration built at a smaller batch: a size that overflows does not fit.
      if (lo == 0) return ok.status();
      ok = false;
    }
    if (*ok) {
      lo = batch;
    } else {
      hi = batch;
    }
    last = batch;
    if (bracketed) ++bracketed_steps;
  }
  result.max_batch = lo;
  result.at_search_limit = lo == kMaxSearchBatch;
  if (lo == 0) {
    TF_ASSIGN_OR_RETURN(const Probe one, unbounded(device, 1));
    result.next_device_used_bytes = one.device_used;
    return result;
  }
  TF_ASSIGN_OR_RETURN(Probe at, unbounded(device, lo));
  if (at.device_used > result.budget_bytes) {
    TF_ASSIGN_OR_RETURN(at, run(device, lo));  // fits through allocator retries
  }
  result.peak_allocated_bytes = at.allocated;
  result.peak_reserved_bytes = at.reserved;
  result.device_used_bytes = at.device_used;
  result.alloc_retries = at.retries;
  if (!result.at_search_limit) {
    Result<Probe> next = unbounded(device, lo + 1);
    if (next.ok()) result.next_device_used_bytes = next->device_used;
  }
  return result;
}

// ---- knobs ----------------------------------------------------------------------------------

std::string_view knob_kind_name(KnobKind kind) {
  switch (kind) {
    case KnobKind::kFree:
      return "free";
    case KnobKind::kPrecision:
      return "precision";
    case KnobKind::kRecompute:
      return "recompute";
    case KnobKind::kRecipe:
      return "recipe";
    case KnobKind::kModel:
      return "model";
  }
  return "?";
}

namespace {

bool matches_some_module(const Graph& graph, const std::string& pattern) {
  return std::any_of(graph.modules.begin(), graph.modules.end(), [&](const Module& m) {
    return m.first_node != m.end_node && module_matches(m.path, pattern);
  });
}

bool matches_some_param(const Graph& graph, const std::string& prefix) {
  return std::any_of(graph.params.begin(), graph.params.end(),
                     [&](const Param& p) { return !p.buffer && path_matches(p.name, prefix); });
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

void add_checkpoint_knobs(const Graph& graph, const ModelSpec& spec,
                          const std::vector<std::string>& current, const StepFlops& base,
                          std::vector<Knob>& knobs) {
  for (const CheckpointFamily& family : spec.checkpoint_families) {
    std::vector<std::string> patterns;
    for (const std::string& p : family.patterns) {
      if (!contains(current, p) && matches_some_module(graph, p)) patterns.push_back(p);
    }
    if (patterns.empty()) continue;
    std::vector<std::string> all = current;
    all.insert(all.end(), patterns.begin(), patterns.end());
    Result<StepFlops> with = step_flops(graph, all);
    if (!with.ok()) continue;
    Knob k;
    k.name = fmt::format("checkpoint {}", family.name);
    k.kind = KnobKind::kRecompute;
    for (const std::string& p : patterns) {
      k.args.emplace_back("--checkpoint");
      k.args.push_back(p);
    }
    k.recompute = (with->recompute - base.recompute) / (base.step() + base.recompute);
    k.cost = fmt::format("+{:.1f}% FLOPs", 100 * k.recompute);
    knobs.push_back(std::move(k));
  }
}

void add_model_knobs(const ResolvedEstimate& r, const ModelSpec& spec, std::vector<Knob>& knobs) {
  const auto model_knob = [](std::string name, std::vector<std::string> args) {
    Knob k;
    k.name = std::move(name);
    k.kind = KnobKind::kModel;
    k.args = std::move(args);
    k.cost = "changes the model";
    return k;
  };
  if (spec.input == InputKind::kImage) {
    const Dims in = r.request.input.value_or(spec.default_input);
    if (in.size() == 3 && in[1] >= 2 && in[2] >= 2) {
      const Dims half{in[0], in[1] / 2, in[2] / 2};
      knobs.push_back(
          model_knob(fmt::format("image {}x{} -> {}x{}", in[1], in[2], half[1], half[2]),
                     {"--input", fmt::format("{}x{}x{}", half[0], half[1], half[2])}));
    }
  } else if (spec.input == InputKind::kSequence) {
    const int64_t len = r.request.seq_len.value_or(spec.default_seq_len);
    if (len >= 2) {
      knobs.push_back(model_knob(fmt::format("seq-len {} -> {}", len, len / 2),
                                 {"--seq-len", std::to_string(len / 2)}));
    }
  }
  if (!spec.smaller) return;
  Result<ModelConfig> config = model_config(r.request);
  if (!config.ok()) return;
  for (const ModelChange& change : spec.smaller(*config)) {
    std::vector<std::string> args;
    for (const auto& [key, value] : change.sets) {
      args.emplace_back("--set");
      args.push_back(fmt::format("{}={}", key, value));
    }
    knobs.push_back(model_knob(change.what, std::move(args)));
  }
}

}  // namespace

Result<std::vector<Knob>> memory_knobs(const EstimateFlags& flags, const DeviceProfile& device) {
  TF_ASSIGN_OR_RETURN(const ResolvedEstimate r, resolve_flags(flags));
  if (r.request.options.target.device != Device::kCuda) {
    return unsupported("fit plans for CUDA GPUs", "drop --device-profile cpu");
  }
  std::vector<Knob> knobs;
  const auto add = [&](std::string name, KnobKind kind, std::string group,
                       std::vector<std::string> args, std::string cost) {
    knobs.push_back({std::move(name), kind, std::move(group), std::move(args), 0, std::move(cost)});
  };
  if (r.trace) {
    // A trace fixes the model and its recipe: only the optimizer's implementation and the
    // allocator's settings can change.
    const std::optional<OptimizerKind> kind = r.trace->trace.optimizer.kind;
    if (kind && *kind != OptimizerKind::kSgd &&
        resolve_optimizer_impl(r.options.training.optimizer.impl, r.request.options.target) !=
            OptimizerImpl::kFused) {
      add("fused optimizer", KnobKind::kFree, "optimizer", {"--optimizer-impl", "fused"}, "none");
    }
    if (!flags.device.expandable_segments) {
      add("expandable segments", KnobKind::kFree, "", {"--expandable-segments"}, "none");
    }
    return knobs;
  }
  const ModelSpec* spec = find_model(r.request.name);
  TF_CHECK(spec != nullptr) << "resolved an unknown model";
  TF_ASSIGN_OR_RETURN(const Graph graph, build_model(r.request));
  if (r.request.options.precision == Precision::kFp32) {
    if (device.sm >= 80) {
      add("AMP bf16", KnobKind::kPrecision, "precision", {"--precision", "amp-bf16"},
          "none (sm80+)");
    }
    add("AMP fp16", KnobKind::kPrecision, "precision", {"--precision", "amp-fp16"}, "a GradScaler");
  }
  const OptimizerConfig& opt = r.options.training.optimizer;
  const bool adam = opt.kind == OptimizerKind::kAdam || opt.kind == OptimizerKind::kAdamW;
  const OptimizerImpl impl = resolve_optimizer_impl(opt.impl, r.request.options.target);
  if ((adam || opt.kind == OptimizerKind::kMomentum) && impl != OptimizerImpl::kFused) {
    add("fused optimizer", KnobKind::kFree, "optimizer", {"--optimizer-impl", "fused"}, "none");
  }
  if (adam) {
    const bool w = opt.kind == OptimizerKind::kAdamW;
    add(w ? "8-bit AdamW state" : "8-bit Adam state", KnobKind::kPrecision, "optimizer",
        {"--optimizer", w ? "adamw8bit" : "adam8bit", "--optimizer-impl", "default"},
        "needs bitsandbytes");
    add("SGD with momentum", KnobKind::kRecipe, "optimizer",
        {"--optimizer", "momentum", "--optimizer-impl", "default"}, "a new optimizer");
  }
  if (!flags.device.expandable_segments) {
    add("expandable segments", KnobKind::kFree, "", {"--expandable-segments"}, "none");
  }
  TF_ASSIGN_OR_RETURN(const StepFlops base, step_flops(graph, r.options.training.checkpoint));
  add_checkpoint_knobs(graph, *spec, r.options.training.checkpoint, base, knobs);
  std::vector<std::string> freeze;
  for (const std::string& prefix : spec->backbone) {
    if (!contains(flags.source.freeze, prefix) && matches_some_param(graph, prefix)) {
      freeze.emplace_back("--freeze");
      freeze.push_back(prefix);
    }
  }
  if (!freeze.empty()) {
    add("freeze backbone", KnobKind::kRecipe, "", freeze, "backbone frozen");
  }
  add_model_knobs(r, *spec, knobs);
  return knobs;
}

Result<EstimateFlags> apply_knobs(const EstimateFlags& flags, const std::vector<const Knob*>& on) {
  std::vector<std::string> args = estimate_args(flags);
  for (const Knob* k : on) args.insert(args.end(), k->args.begin(), k->args.end());
  return parse_layered_flags(args);
}

Result<WhatIf> what_if(const EstimateFlags& flags, const std::vector<Knob>& knobs) {
  WhatIf w;
  TF_ASSIGN_OR_RETURN(const ResolvedEstimate r, resolve_flags(flags));
  const DeviceProfile& device = r.options.device;
  for (const Knob& k : knobs) {
    Result<EstimateFlags> variant = apply_knobs(flags, {&k});
    Result<EstimateRun> run = variant.ok() ? run_pipeline(*variant, {}) : variant.status();
    ++w.estimates;
    if (!run.ok()) {
      w.skipped.emplace_back(k.name, run.status().message());
      continue;
    }
    TF_ASSIGN_OR_RETURN(BatchSearch search, BatchSearch::create(*variant));
    TF_ASSIGN_OR_RETURN(BatchFit fit, search.fit(device));
    w.estimates += search.estimates();
    w.rows.push_back({k, *std::move(variant), std::move(run->estimate), fit});
  }
  std::stable_sort(w.rows.begin(), w.rows.end(), [](const WhatIfRow& a, const WhatIfRow& b) {
    if (a.fit.max_batch != b.fit.max_batch) return a.fit.max_batch > b.fit.max_batch;
    return a.estimate.device_used_bytes < b.estimate.device_used_bytes;
  });
  return w;
}

namespace {

// Knobs grouped into slots: one slot per exclusive group (at most one of its knobs on) and one
// per other knob. A combination picks an option index per slot, -1 for none.
struct Option {
  const Knob* knob = nullptr;
  int64_t device_used = 0;  // with this knob alone, at the target batch
};
using Combination = std::vector<int>;

class TargetSearch {
 public:
  TargetSearch(EstimateFlags at, std::vector<std::vector<Option>> slots)
      : at_(std::move(at)), slots_(std::move(slots)) {}

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

  // Every combination whose most intrusive knob is `kind`, cheapest first: least recompute,
  // then fewest knobs.
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
      const double ra = recompute(a);
      const double rb = recompute(b);
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
    Result<EstimateFlags> flags = apply_knobs(at_, knobs(c));
    Result<EstimateRun> run = flags.ok() ? run_pipeline(*flags, {}) : flags.status();
    if (!run.ok()) return Outcome::kRejected;
    if (!run->estimate.fits) {
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
  double recompute(const Combination& c) const {
    double r = 0;
    for (const Knob* knob : knobs(c)) r += knob->recompute;
    return r;
  }
  static int count(const Combination& c) {
    return static_cast<int>(std::count_if(c.begin(), c.end(), [](int o) { return o >= 0; }));
  }

  EstimateFlags at_;
  std::vector<std::vector<Option>> slots_;
  std::vector<Combination> failed_;
  int tried_ = 0;
};

// Combinations tried within the cheapest fitting kind before settling for its strongest one.
constexpr int kMaxCombinations = 400;

Status accumulation_plan(const EstimateFlags& flags, TargetPlan& plan) {
  // Accumulating keeps the gradients alive through the next micro-batch's backward, so the
  // micro-batch is searched with accumulation on.
  EstimateFlags acc = flags;
  acc.training.grad_accum = 2;
  TF_ASSIGN_OR_RETURN(const ResolvedEstimate r, resolve_flags(acc));
  TF_ASSIGN_OR_RETURN(BatchSearch search, BatchSearch::create(acc));
  TF_ASSIGN_OR_RETURN(const BatchFit fit, search.fit(r.options.device));
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
  acc.source.batch = micro;
  acc.training.grad_accum = static_cast<int>(steps);
  TF_ASSIGN_OR_RETURN(EstimateRun run, run_pipeline(acc, {}));
  plan.flags = acc;
  plan.estimate = std::move(run.estimate);
  return {};
}

}  // namespace

Result<TargetPlan> plan_target(const EstimateFlags& flags, const std::vector<Knob>& knobs,
                               int64_t target, bool allow_model_changes) {
  if (target < 1) {
    return invalid_argument(fmt::format("--target-batch must be at least 1, got {}", target),
                            "for example --target-batch 64");
  }
  TargetPlan plan;
  plan.target = target;
  EstimateFlags at = flags;
  at.source.batch = target;
  TF_ASSIGN_OR_RETURN(EstimateRun as_given, run_pipeline(at, {}));
  plan.combinations_tried = 1;
  if (as_given.estimate.fits) {
    plan.fits = true;
    plan.flags = at;
    plan.estimate = std::move(as_given.estimate);
    return plan;
  }
  // Each knob alone at the target batch orders the options of its slot.
  std::vector<std::vector<Option>> slots;
  std::vector<std::string> groups;
  for (const Knob& k : knobs) {
    if (k.kind == KnobKind::kModel && !allow_model_changes) continue;
    Result<EstimateFlags> variant = apply_knobs(at, {&k});
    Result<EstimateRun> run = variant.ok() ? run_pipeline(*variant, {}) : variant.status();
    ++plan.combinations_tried;
    if (!run.ok()) continue;
    const Option option{&k, run->estimate.device_used_bytes};
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
  TargetSearch search(at, std::move(slots));
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
    TF_RETURN_IF_ERROR(accumulation_plan(flags, plan));
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
  TF_ASSIGN_OR_RETURN(plan.flags, apply_knobs(at, search.knobs(chosen)));
  TF_ASSIGN_OR_RETURN(EstimateRun run, run_pipeline(plan.flags, {}));
  plan.estimate = std::move(run.estimate);
  return plan;
}

}  // namespace trainfit
