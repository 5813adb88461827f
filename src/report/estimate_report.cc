#include "report/estimate_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

#include "base/parallel.h"
#include "graph/builder.h"
#include "lower/optimizer_step.h"

namespace trainfit {

std::string model_title(const EstimateHeader& h) {
  if (h.hf_config.empty()) return h.model;
  return fmt::format("{} ({})", h.model, std::filesystem::path(h.hf_config).filename().string());
}

std::string lora_label(const LoraConfig& lora) {
  std::string s = fmt::format("LoRA r={}, alpha {:g}", lora.rank, lora.alpha);
  if (lora.dropout > 0) s += fmt::format(", dropout {:g}", lora.dropout);
  s += fmt::format(" on {}", fmt::join(lora.target, ", "));
  if (!lora.fp32_adapters) s += ", adapters in the base dtype";
  if (lora.quant != LoraConfig::Quant::kOff) {
    s += fmt::format(", 4-bit {} base{}", lora.quant == LoraConfig::Quant::kNf4 ? "NF4" : "FP4",
                     lora.double_quant ? " (double quantization)" : "");
    if (lora.prepare) s += ", the rest fp32 (prepare_model_for_kbit_training)";
  }
  return s;
}

EstimateHeader header_of(const ResolvedRequest& r) {
  EstimateHeader h;
  h.model = r.model.name;
  h.hf_config = r.hf_config;
  h.lora = r.model.options.lora;
  h.batch = r.model.batch;
  h.precision = r.model.options.precision;
  h.optimizer = r.options.training.optimizer;
  h.resolved_impl = resolve_optimizer_impl(h.optimizer.impl, r.model.options.target);
  h.device = r.options.device;
  h.training = r.options.training;
  h.cost = r.options.cost;
  h.dataset_size = r.options.dataset_size;
  if (r.trace) {
    h.notes = trace_notes(*r.trace, h.device.target);
    if (h.device.timing) {
      h.notes.emplace_back(
          "a trace records allocations, not op shapes, so there is no step time for it; give "
          "--model for a zoo model's");
    }
  }
  if (h.training.distributed.world_size > 1 && h.device.target.device == Device::kCuda) {
    // Measured through PyTorch on 4 A100s with NVLink, one all-reduce per group: 544 MB a
    // process for a 2-GPU group, 688 MB for larger ones (NVIDIA/nccl#964). NCCL's maintainers:
    // linear in its channels, so less over PCIe and more on H100 NVLink (NVIDIA/nccl#986).
    h.notes.emplace_back(
        "NCCL's buffers are outside PyTorch's allocator and not in device used: about 544 MB a "
        "GPU for 2 GPUs and 688 MB for more, as measured on A100s with NVLink (NVIDIA/nccl#964; "
        "fewer channels over PCIe take less); torch.cuda.mem_get_info() after the first "
        "all-reduce shows yours");
  }
  return h;
}

std::string_view precision_label(const EstimateHeader& h) {
  return h.training.distributed.fsdp.mixed_precision_bf16
             ? "fp32 model computing in bf16 (FSDP MixedPrecision)"
             : precision_name(h.precision);
}

std::string strategy_label(const DistributedConfig& d) {
  switch (d.strategy) {
    case Strategy::kFsdp:
      return fmt::format("FSDP ({})", kFsdpShardingNames.name(d.fsdp.sharding));
    case Strategy::kZero1:
      return "DDP with ZeroRedundancyOptimizer";
    default:
      return "DDP";
  }
}

std::string_view impl_label(const EstimateHeader& h) {
  return is_bitsandbytes(h.optimizer.kind) ? "bitsandbytes" : optimizer_impl_name(h.resolved_impl);
}

std::string optimizer_line(const EstimateHeader& h) {
  std::string s = fmt::format("{} ({})", optimizer_name(h.optimizer.kind), impl_label(h));
  if (h.optimizer.weight_decay >= 0)
    s += fmt::format(", weight_decay {:g}", h.optimizer.weight_decay);
  if (h.training.grad_accum > 1)
    s += fmt::format(", {} micro-batches per step", h.training.grad_accum);
  return s;
}

namespace {

int batch_norm_layers(const Graph& graph) {
  return static_cast<int>(std::ranges::count_if(graph.modules, is_batch_norm));
}

std::optional<ScalingPlan> scaling_plan(const EstimateRun& run) {
  const ResolvedRequest& r = run.resolved;
  const TrainingConfig& t = r.options.training;
  if (t.distributed.world_size == 1 && !r.baseline_batch) return std::nullopt;
  return plan_scaling({.per_gpu_batch = r.model.batch,
                       .gpus = t.distributed.world_size,
                       .grad_accum = t.grad_accum,
                       .optimizer = t.optimizer.kind,
                       .baseline_batch = r.baseline_batch,
                       .baseline_lr = r.baseline_lr,
                       .dataset_size = r.options.dataset_size,
                       .batch_norm_layers = batch_norm_layers(run.graph)});
}

// scaled_dot_product_attention opens an "SDPAMathFallback" scope where grouped-query attention
// falls to the math path (ops_attention.cc).
std::optional<std::string> sdpa_fallback_note(const Graph& graph) {
  const auto layers = std::ranges::count_if(
      graph.modules, [](const Module& m) { return m.type == "SDPAMathFallback"; });
  if (layers == 0) return std::nullopt;
  return fmt::format(
      "SDPA runs PyTorch's math path in {} attention call{}: no fused kernel takes grouped "
      "key/value heads here (flash needs fp16 or bf16, the memory-efficient kernel takes none), so "
      "each keeps its scores as eager attention does; --precision bf16 or amp-bf16 runs the flash "
      "kernel",
      layers, layers == 1 ? "" : "s");
}

// Under autocast, parameters in a 16-bit dtype were loaded so (a decoder's dtype=, whose auto
// follows the transformers release): say so, since AMP usually means fp32 master weights.
std::optional<std::string> low_precision_weights_note(const Graph& graph) {
  if (!is_amp(graph.precision)) return std::nullopt;
  std::optional<DType> low;
  for (const Param& p : graph.params) {
    const DType d = graph.value(p.value).dtype;
    if (!p.buffer && (d == DType::kBFloat16 || d == DType::kFloat16)) low = d;
  }
  if (!low) return std::nullopt;
  return fmt::format(
      "the weights are {} under autocast, as loaded (transformers 5 loads a config's "
      "torch_dtype); --set dtype=float32 keeps fp32 master weights",
      dtype_name(*low));
}

}  // namespace

Result<EstimateReport> make_estimate_report(const TrainingRequest& request,
                                            const EstimateDetail& detail) {
  // The step time under each speed-up is predicted beside the estimate: it does not need it.
  const std::vector<SpeedupChange> speedups = detail.step_time && request.device.timing
                                                  ? speedup_changes(request)
                                                  : std::vector<SpeedupChange>();
  std::optional<Result<EstimateRun>> estimated;
  std::vector<PredictedChange> changes(speedups.size());
  parallel_for(1 + speedups.size(), [&](size_t, size_t task) {
    if (task == 0) {
      PipelineEstimator estimator;
      estimated = estimator.run(request, detail);
    } else {
      changes[task - 1] = predict_change(request, speedups[task - 1]);
    }
  });
  TF_ASSIGN_OR_RETURN(EstimateRun run, *std::move(estimated));
  EstimateReport report;
  report.header = header_of(run.resolved);
  for (const auto& note : {sdpa_fallback_note(run.graph), low_precision_weights_note(run.graph)}) {
    if (note) report.header.notes.push_back(*note);
  }
  if (run.estimate.unmeasured_searches > 0) {
    report.header.notes.push_back(fmt::format(
        "cuDNN benchmark mode: the first call of {} of {} convolution problems times candidate "
        "plans whose workspaces no recording measured; trainfit counts the heuristic plan's, so "
        "the first iteration may peak higher",
        run.estimate.unmeasured_searches, run.estimate.plan_searches));
  }
  report.scaling = scaling_plan(run);
  if (run.estimate.time && detail.step_time) {
    report.speedups = rank_speedups(changes, *run.estimate.time);
  }
  if (detail.timeline) {
    const EventNames names = names_of(run);
    report.timeline.reserve(run.estimate.timeline.size());
    for (const TimelinePoint& p : run.estimate.timeline) {
      TimelineRow row{p.iteration + 1, p.phase,    "",      "",          p.alloc,
                      p.empty_cache,   p.category, p.bytes, p.allocated, p.reserved};
      if (p.node != kNone) {
        row.op = names.op(p.node);
        const ModuleId m = names.node_module(p.node);
        if (m != kNone) row.module = names.module(m);
      }
      report.timeline.push_back(std::move(row));
    }
  }
  report.estimate = std::move(run.estimate);
  return report;
}

}  // namespace trainfit
