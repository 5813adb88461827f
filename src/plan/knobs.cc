#include "plan/knobs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "lower/flops.h"
#include "lower/optimizer_step.h"
#include "pipeline/request_options.h"

namespace trainfit {

namespace {

// A change and the words the option table gives it: the options `keys` name, as they stand
// after `apply` on an empty request (so a list holds the change's items alone), with their
// values even where these are the defaults, since the words go after the user's own.
Change change_of(std::function<void(TrainingRequest&)> apply,
                 std::initializer_list<std::string_view> keys) {
  TrainingRequest changed;
  apply(changed);
  std::vector<std::string> args;
  for (const std::string_view key : keys) {
    const std::vector<std::string> words = option_words(key, changed, /*always=*/true);
    args.insert(args.end(), words.begin(), words.end());
  }
  return {std::move(apply), std::move(args)};
}

}  // namespace

Change set_precision(Precision precision) {
  return change_of([=](TrainingRequest& r) { r.precision = precision; }, {"precision"});
}

Change set_optimizer_impl(OptimizerImpl impl) {
  return change_of([=](TrainingRequest& r) { r.optimizer_impl = impl; }, {"optimizer_impl"});
}

Change set_optimizer(OptimizerKind kind) {
  return change_of(
      [=](TrainingRequest& r) {
        r.optimizer = kind;
        r.optimizer_impl = OptimizerImpl::kDefault;
      },
      {"optimizer", "optimizer_impl"});
}

Change use_expandable_segments() {
  return change_of([](TrainingRequest& r) { r.expandable_segments = true; },
                   {"expandable_segments"});
}

Change add_checkpoints(std::vector<std::string> patterns) {
  return change_of(
      [patterns = std::move(patterns)](TrainingRequest& r) {
        r.checkpoint.insert(r.checkpoint.end(), patterns.begin(), patterns.end());
      },
      {"checkpoint"});
}

Change add_frozen(std::vector<std::string> prefixes) {
  return change_of(
      [prefixes = std::move(prefixes)](TrainingRequest& r) {
        r.freeze.insert(r.freeze.end(), prefixes.begin(), prefixes.end());
      },
      {"freeze"});
}

Change set_input(Dims input) {
  return change_of([input = std::move(input)](TrainingRequest& r) { r.input = input; }, {"input"});
}

Change set_seq_len(int64_t seq_len) {
  return change_of([=](TrainingRequest& r) { r.seq_len = seq_len; }, {"seq_len"});
}

Change add_sets(std::vector<std::pair<std::string, std::string>> sets) {
  return change_of(
      [sets = std::move(sets)](TrainingRequest& r) {
        r.sets.insert(r.sets.end(), sets.begin(), sets.end());
      },
      {"set"});
}

Change both(Change first, Change second) {
  first.args.insert(first.args.end(), second.args.begin(), second.args.end());
  return {[a = std::move(first.apply), b = std::move(second.apply)](TrainingRequest& r) {
            a(r);
            b(r);
          },
          std::move(first.args)};
}

Change set_lora(const LoraConfig& lora) {
  return change_of([lora](TrainingRequest& r) { r.lora = lora; }, {"lora"});
}

Change use_gradient_as_bucket_view() {
  return change_of([](TrainingRequest& r) { r.ddp.gradient_as_bucket_view = true; },
                   {"gradient_as_bucket_view"});
}

Change set_strategy(Strategy strategy) {
  return change_of([=](TrainingRequest& r) { r.strategy = strategy; }, {"strategy"});
}

Change use_fsdp(std::vector<std::string> wrap) {
  // The units as one comma-separated --fsdp-wrap, which reads shorter than one flag each.
  std::vector<std::string> args = {option_flag("strategy"), "fsdp"};
  if (!wrap.empty()) {
    args.push_back(option_flag("fsdp_wrap"));
    args.push_back(fmt::format("{}", fmt::join(wrap, ",")));
  }
  return {[wrap](TrainingRequest& r) {
            r.strategy = Strategy::kFsdp;
            r.fsdp.wrap = wrap;
            r.ddp = {};
          },
          std::move(args)};
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

// The units `patterns` wrap, with the classes of the modules they match.
FsdpBlocks units_of(const Graph& graph, std::vector<std::string> patterns) {
  FsdpBlocks out;
  out.patterns = std::move(patterns);
  for (const Module& m : graph.modules) {
    for (const std::string& p : out.patterns) {
      if (module_matches(m.path, p) && !contains(out.classes, m.type)) {
        out.classes.push_back(m.type);
      }
    }
  }
  return out;
}

// The model's repeated blocks: the checkpoint families' patterns that match a module.
FsdpBlocks block_units(const Graph& graph, const ModelSpec& spec) {
  std::vector<std::string> patterns;
  for (const CheckpointFamily& family : spec.checkpoint_families) {
    for (const std::string& p : family.patterns) {
      if (matches_some_module(graph, p)) patterns.push_back(p);
    }
  }
  return units_of(graph, std::move(patterns));
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
    k.change = add_checkpoints(std::move(patterns));
    k.recompute = (with->recompute - base.recompute) / (base.step() + base.recompute);
    k.cost = fmt::format("+{:.1f}% FLOPs", 100 * k.recompute);
    knobs.push_back(std::move(k));
  }
}

void add_model_knobs(const ResolvedRequest& r, const ModelSpec& spec, std::vector<Knob>& knobs) {
  const auto model_knob = [](std::string name, Change change) {
    Knob k;
    k.name = std::move(name);
    k.kind = KnobKind::kModel;
    k.change = std::move(change);
    k.cost = "changes the model";
    return k;
  };
  if (spec.input == InputKind::kImage) {
    const Dims in = r.model.input.value_or(spec.default_input);
    if (in.size() == 3 && in[1] >= 2 && in[2] >= 2) {
      const Dims half{in[0], in[1] / 2, in[2] / 2};
      knobs.push_back(model_knob(
          fmt::format("image {}x{} -> {}x{}", in[1], in[2], half[1], half[2]), set_input(half)));
    }
  } else if (spec.input == InputKind::kSequence) {
    const int64_t len = r.model.seq_len.value_or(spec.default_seq_len);
    if (len >= 2) {
      knobs.push_back(
          model_knob(fmt::format("seq-len {} -> {}", len, len / 2), set_seq_len(len / 2)));
    }
  }
  if (!spec.smaller) return;
  Result<ModelConfig> config = model_config(r.model);
  if (!config.ok()) return;
  for (const ModelChange& change : spec.smaller(*config)) {
    knobs.push_back(model_knob(change.what, add_sets(change.sets)));
  }
}

// LoRA instead of full fine-tuning, on peft's default targets for the model and on every Linear,
// and QLoRA (its base in 4-bit NF4) where the request's precision and strategy allow one.
void add_lora_knobs(const TrainingRequest& request, const ModelSpec& spec,
                    std::vector<Knob>& knobs) {
  const bool quantizable = check_quantized_base(request).ok();
  constexpr std::string_view kFourBit = "4-bit NF4 weights, dequantized at each use";
  if (request.lora) {
    if (!quantizable || request.lora->quant != LoraConfig::Quant::kOff) return;
    LoraConfig q = *request.lora;
    q.quant = LoraConfig::Quant::kNf4;
    knobs.push_back({"4-bit NF4 base (QLoRA)", KnobKind::kRecipe, "lora", set_lora(q), 0,
                     std::string(kFourBit)});
    return;
  }
  if (spec.lora_target.empty()) return;
  LoraConfig lora;
  lora.rank = 16;
  lora.alpha = 32;
  lora.target = spec.lora_target;
  const std::string targets = fmt::format("{}", fmt::join(spec.lora_target, ", "));
  knobs.push_back({fmt::format("LoRA r=16 on {}", targets), KnobKind::kRecipe, "lora",
                   set_lora(lora), 0, "only adapters train"});
  if (quantizable) {
    LoraConfig q = lora;
    q.quant = LoraConfig::Quant::kNf4;
    knobs.push_back({fmt::format("QLoRA r=16 on {}", targets), KnobKind::kRecipe, "lora",
                     set_lora(q), 0, std::string(kFourBit)});
  }
  lora.target = {std::string(kAllLinear)};
  knobs.push_back({"LoRA r=16 on all-linear", KnobKind::kRecipe, "lora", set_lora(lora), 0,
                   "only adapters train"});
}

// The model's own settings that keep its math (the key/value cache off, SDPA, Liger's loss),
// where the request can take them (Liger's loss is not modelled under autocast).
void add_setting_knobs(const ResolvedRequest& r, const ModelSpec& spec, std::vector<Knob>& knobs) {
  if (!spec.settings) return;
  Result<ModelConfig> config = model_config(r.model);
  if (!config.ok()) return;
  for (const ModelChange& change : spec.settings(*config)) {
    ModelRequest changed = r.model;
    changed.sets.insert(changed.sets.end(), change.sets.begin(), change.sets.end());
    if (!build_model(changed).ok()) continue;
    knobs.push_back({change.what, KnobKind::kFree, "", add_sets(change.sets), 0, change.cost});
  }
}

}  // namespace

Result<std::vector<Knob>> memory_knobs(const TrainingRequest& request,
                                       const DeviceProfile& device) {
  TF_ASSIGN_OR_RETURN(const ResolvedRequest r, resolve(request));
  const KernelTarget target = r.model.options.target;
  if (target.device != Device::kCuda) {
    return unsupported("fit plans for CUDA GPUs", "drop --device-profile cpu");
  }
  std::vector<Knob> knobs;
  const auto add = [&](std::string name, KnobKind kind, std::string group, Change change,
                       std::string cost) {
    knobs.push_back(
        {std::move(name), kind, std::move(group), std::move(change), 0, std::move(cost)});
  };
  const OptimizerConfig& opt = r.options.training.optimizer;
  const OptimizerImpl impl = resolve_optimizer_impl(opt.impl, target);
  if (r.trace) {
    // A trace fixes the model and its recipe: only the optimizer's implementation and the
    // allocator's settings can change.
    const std::optional<OptimizerKind> kind = r.trace->trace.optimizer.kind;
    if (kind && *kind != OptimizerKind::kSgd && impl != OptimizerImpl::kFused) {
      add("fused optimizer", KnobKind::kFree, "optimizer",
          set_optimizer_impl(OptimizerImpl::kFused), "none");
    }
    if (!request.expandable_segments) {
      add("expandable segments", KnobKind::kFree, "", use_expandable_segments(), "none");
    }
    return knobs;
  }
  const ModelSpec* spec = find_model(r.model.name);
  TF_CHECK(spec != nullptr) << "resolved an unknown model";
  TF_ASSIGN_OR_RETURN(const Graph graph, build_model(r.model));
  if (r.model.options.precision == Precision::kFp32) {
    // The fp32 run's weights stay fp32 under autocast: where the model says what its weights
    // were loaded in (the decoders' dtype=, which follows the transformers release), AMP pins it.
    const bool loads = std::any_of(spec->keys.begin(), spec->keys.end(),
                                   [](const SetKey& k) { return k.name == "dtype"; });
    const auto amp = [loads](Precision precision) {
      return loads ? both(set_precision(precision), add_sets({{"dtype", "float32"}}))
                   : set_precision(precision);
    };
    if (device.sm >= 80) {
      add("AMP bf16", KnobKind::kPrecision, "precision", amp(Precision::kAmpBf16), "none (sm80+)");
    }
    add("AMP fp16", KnobKind::kPrecision, "precision", amp(Precision::kAmpFp16), "a GradScaler");
  }
  const bool adam = opt.kind == OptimizerKind::kAdam || opt.kind == OptimizerKind::kAdamW;
  if ((adam || opt.kind == OptimizerKind::kMomentum) && impl != OptimizerImpl::kFused) {
    add("fused optimizer", KnobKind::kFree, "optimizer", set_optimizer_impl(OptimizerImpl::kFused),
        "none");
  }
  if (adam) {
    const bool w = opt.kind == OptimizerKind::kAdamW;
    add(w ? "8-bit AdamW state" : "8-bit Adam state", KnobKind::kPrecision, "optimizer",
        set_optimizer(w ? OptimizerKind::kAdamW8bit : OptimizerKind::kAdam8bit),
        "needs bitsandbytes");
    add("paged 8-bit AdamW", KnobKind::kPrecision, "optimizer",
        set_optimizer(OptimizerKind::kPagedAdamW8bit), "needs bitsandbytes");
    add("SGD with momentum", KnobKind::kRecipe, "optimizer",
        set_optimizer(OptimizerKind::kMomentum), "a new optimizer");
  }
  if (!request.expandable_segments) {
    add("expandable segments", KnobKind::kFree, "", use_expandable_segments(), "none");
  }
  const DistributedConfig& dist = r.options.training.distributed;
  if (dist.strategy == Strategy::kDdp || dist.strategy == Strategy::kZero1) {
    if (!dist.ddp.gradient_as_bucket_view) {
      add("gradient as bucket view", KnobKind::kFree, "", use_gradient_as_bucket_view(), "none");
    }
    const bool stateful = opt.kind != OptimizerKind::kSgd;
    if (dist.strategy == Strategy::kDdp && dist.world_size > 1 && stateful) {
      add("ZeroRedundancyOptimizer", KnobKind::kFree, "", set_strategy(Strategy::kZero1),
          "a broadcast of the parameters after each step");
    }
    // FSDP with the model's repeated blocks as units (those checkpointing offers): parameters,
    // gradients and optimizer state sharded. 1.13 cannot flatten frozen and trained
    // parameters into one unit, so not with --freeze or --lora.
    if (dist.world_size > 1 && request.freeze.empty() && !request.lora) {
      add("FSDP (full_shard)", KnobKind::kFree, "", use_fsdp(block_units(graph, *spec).patterns),
          "all-gathers before each unit's forward and backward: 1.5x DDP's traffic");
    }
  }
  TF_ASSIGN_OR_RETURN(const StepFlops base, step_flops(graph, r.options.training.checkpoint,
                                                       r.options.training.checkpoint_reentrant));
  add_checkpoint_knobs(graph, *spec, r.options.training.checkpoint, base, knobs);
  std::vector<std::string> freeze;
  for (const std::string& prefix : spec->backbone) {
    if (!contains(request.freeze, prefix) && matches_some_param(graph, prefix)) {
      freeze.push_back(prefix);
    }
  }
  if (!freeze.empty()) {
    add("freeze backbone", KnobKind::kRecipe, "", add_frozen(std::move(freeze)), "backbone frozen");
  }
  add_lora_knobs(request, *spec, knobs);
  add_setting_knobs(r, *spec, knobs);
  add_model_knobs(r, *spec, knobs);
  return knobs;
}

Result<FsdpBlocks> fsdp_blocks(const ResolvedRequest& r) {
  if (r.trace) return FsdpBlocks{};
  const ModelSpec* spec = find_model(r.model.name);
  TF_CHECK(spec != nullptr) << "resolved an unknown model";
  TF_ASSIGN_OR_RETURN(const Graph graph, build_model(r.model));
  const std::vector<std::string>& wrap = r.options.training.distributed.fsdp.wrap;
  return wrap.empty() ? block_units(graph, *spec) : units_of(graph, wrap);
}

std::optional<double> step_change(const Estimate& with, const Estimate& without) {
  if (!with.time || !without.time || with.time->samples_per_s <= 0) return std::nullopt;
  return without.time->samples_per_s / with.time->samples_per_s - 1;
}

TrainingRequest with_knobs(TrainingRequest request, const std::vector<const Knob*>& on) {
  for (const Knob* k : on) k->change.apply(request);
  return request;
}

}  // namespace trainfit
