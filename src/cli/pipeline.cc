#include "cli/pipeline.h"

#include <fmt/format.h>

#include <mutex>
#include <utility>
#include <vector>

namespace trainfit {

void add_estimate_flags(CLI::App& app, EstimateFlags& flags) {
  add_model_source(app, flags.source);
  add_training_flags(app, flags.training);
  add_device_flags(app, flags.device);
}

void add_layered_flags(CLI::App& app, EstimateFlags& flags) {
  add_estimate_flags(app, flags);
  for (CLI::Option* o : app.get_options()) {
    if (o->get_items_expected_max() == 1) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
}

Result<EstimateFlags> parse_layered_flags(const std::vector<std::string>& args) {
  CLI::App app{"", "trainfit"};
  EstimateFlags flags;
  add_layered_flags(app, flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return invalid_argument(e.what());
  }
  return flags;
}

std::vector<std::string> estimate_args(const EstimateFlags& f) {
  std::vector<std::string> args;
  const auto add = [&](const char* flag, const std::string& value) {
    if (value.empty()) return;
    args.emplace_back(flag);
    args.push_back(value);
  };
  const ModelSourceOptions& s = f.source;
  add("--model", s.model);
  add("--trace", s.trace);
  for (const std::string& set : s.sets) add("--set", set);
  add("--batch", std::to_string(s.batch));
  add("--input", s.input);
  if (s.seq_len) add("--seq-len", std::to_string(*s.seq_len));
  if (s.precision != "fp32") add("--precision", s.precision);
  if (s.device_profile != "cuda") add("--device-profile", s.device_profile);
  for (const std::string& p : s.freeze) add("--freeze", p);
  const TrainingFlags& t = f.training;
  add("--optimizer", t.optimizer);
  if (t.optimizer_impl != "default") add("--optimizer-impl", t.optimizer_impl);
  if (t.weight_decay != -1) add("--weight-decay", fmt::format("{}", t.weight_decay));
  for (const std::string& p : t.checkpoint) add("--checkpoint", p);
  if (t.grad_accum != 1) add("--grad-accum", std::to_string(t.grad_accum));
  const DeviceFlags& d = f.device;
  add("--gpu", d.gpu);
  add("--gpu-memory", d.gpu_memory);
  add("--cuda-context", d.cuda_context);
  if (d.expandable_segments) args.emplace_back("--expandable-segments");
  add("--max-split-size", d.max_split_size);
  add("--margin", d.margin);
  return args;
}

Result<std::shared_ptr<const TraceModel>> load_trace_model(const std::string& path) {
  // Keyed by the file's bytes, not its path: in a long-lived process (the Python binding) a
  // trace may be rewritten between estimates. A few models are kept, the latest first.
  constexpr size_t kKept = 4;
  static std::mutex mutex;
  static std::vector<std::pair<std::string, std::shared_ptr<const TraceModel>>> loaded;
  TF_ASSIGN_OR_RETURN(std::string text, read_trace_text(path));
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [bytes, model] : loaded) {
      if (bytes == text) return model;
    }
  }
  TF_ASSIGN_OR_RETURN(Trace trace, parse_trace(text, path));
  Result<TraceModel> model = fit_trace(std::move(trace));
  if (!model.ok()) return model.status().with_context(path);
  auto shared = std::make_shared<const TraceModel>(std::move(model).value());
  std::lock_guard<std::mutex> lock(mutex);
  loaded.emplace(loaded.begin(), std::move(text), shared);
  if (loaded.size() > kKept) loaded.pop_back();
  return shared;
}

namespace {

// A trace fixes the model, its inputs and its training recipe; only the batch, the device and
// the optimizer implementation can change.
Status check_trace_flags(const EstimateFlags& flags, const TraceModel& model) {
  const auto fixed = [](std::string_view flag) {
    return unsupported(fmt::format("{} cannot change a traced model", flag),
                       "trace the model again with that setting, or leave the flag out");
  };
  const ModelSourceOptions& s = flags.source;
  if (!s.sets.empty()) return fixed("--set");
  if (!s.input.empty()) return fixed("--input");
  if (s.seq_len) return fixed("--seq-len");
  if (!s.freeze.empty()) return fixed("--freeze");
  if (s.precision != "fp32") return fixed("--precision");
  const TrainingFlags& t = flags.training;
  if (!t.checkpoint.empty()) return fixed("--checkpoint");
  if (t.grad_accum != 1) return fixed("--grad-accum");
  if (t.weight_decay != -1) return fixed("--weight-decay");
  const TraceOptimizer& o = model.trace.optimizer;
  if (!t.optimizer.empty() && (!o.kind || optimizer_name(*o.kind) != t.optimizer)) {
    return unsupported(
        fmt::format("the trace was recorded with {}, not --optimizer {}", o.type, t.optimizer),
        "trace again with that optimizer (python3 -m trainfit.trace --optimizer ...)");
  }
  return {};
}

}  // namespace

Result<ResolvedEstimate> resolve_flags(const EstimateFlags& flags) {
  ResolvedEstimate r;
  TF_ASSIGN_OR_RETURN(r.request, to_request(flags.source));
  if (!flags.source.trace.empty()) {
    TF_ASSIGN_OR_RETURN(r.trace, load_trace_model(flags.source.trace));
    TF_RETURN_IF_ERROR(check_trace_flags(flags, *r.trace));
    r.request.name = r.trace->trace.model;
    TrainingFlags training = flags.training;
    training.optimizer.clear();
    TF_ASSIGN_OR_RETURN(r.options.training,
                        to_training_config(training, r.request.options.target, nullptr));
    const TraceOptimizer& o = r.trace->trace.optimizer;
    r.options.training.optimizer.kind = o.kind.value_or(OptimizerKind::kAdamW);
    if (!o.groups.empty()) r.options.training.optimizer.weight_decay = o.groups[0].weight_decay;
    r.options.training.optimizer.preset =
        o.kind ? fmt::format("traced {}", o.type)
               : fmt::format("traced {} (not one trainfit models: its step is replayed as traced)",
                             o.type);
    TF_ASSIGN_OR_RETURN(r.options.device,
                        to_device_profile(flags.device, r.request.options.target));
    TF_ASSIGN_OR_RETURN(r.options.allocator, to_allocator_config(flags.device));
    return r;
  }
  const KernelTarget target = r.request.options.target;
  TF_ASSIGN_OR_RETURN(r.options.training,
                      to_training_config(flags.training, target, find_model(r.request.name)));
  TF_ASSIGN_OR_RETURN(r.options.device, to_device_profile(flags.device, target));
  TF_ASSIGN_OR_RETURN(r.options.allocator, to_allocator_config(flags.device));
  return r;
}

Result<Estimate> run_resolved(const ResolvedEstimate& resolved) {
  if (resolved.trace)
    return estimate_trace(*resolved.trace, resolved.request.batch, resolved.options);
  TF_ASSIGN_OR_RETURN(const Graph graph, build_model(resolved.request));
  return estimate(graph, resolved.options);
}

EstimateHeader header_of(const ResolvedEstimate& r) {
  EstimateHeader h;
  h.model = r.request.name;
  h.batch = r.request.batch;
  h.precision = r.request.options.precision;
  h.optimizer = r.options.training.optimizer;
  h.resolved_impl = resolve_optimizer_impl(h.optimizer.impl, r.request.options.target);
  h.device = r.options.device;
  h.training = r.options.training;
  if (r.trace) h.notes = trace_notes(*r.trace, h.device.target);
  return h;
}

Result<EstimateRun> run_pipeline(const EstimateFlags& flags, const PipelineExtras& extras) {
  TF_ASSIGN_OR_RETURN(ResolvedEstimate resolved, resolve_flags(flags));
  resolved.options.timeline = extras.timeline;
  resolved.options.explain = extras.explain;
  EstimateRun run;
  run.request = resolved.request;
  run.header = header_of(resolved);
  if (resolved.trace) {
    run.trace = resolved.trace;
    TF_ASSIGN_OR_RETURN(run.estimate, run_resolved(resolved));
    return run;
  }
  TF_ASSIGN_OR_RETURN(run.graph, build_model(resolved.request));
  TF_ASSIGN_OR_RETURN(run.estimate, estimate(run.graph, resolved.options));
  return run;
}

EventNames names_of(const EstimateRun& run) {
  return run.trace ? trace_names(*run.trace) : names_of(run.graph);
}

Result<EstimateRun> run_pipeline(const ModelSourceOptions& source, const TrainingFlags& training,
                                 const DeviceFlags& device, const PipelineExtras& extras) {
  return run_pipeline(EstimateFlags{source, training, device}, extras);
}

}  // namespace trainfit
