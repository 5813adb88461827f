#include <fmt/format.h>

#include "report/format.h"
#include "report/json.h"

namespace trainfit {

nlohmann::json scaling_json(const ScalingPlan& p) {
  nlohmann::json j;
  j["effective_batch"] = p.effective_batch;
  const auto put = [&j](const char* key, const auto& value) {
    j[key] = value ? nlohmann::json(*value) : nlohmann::json();
  };
  put("grad_accum_for_baseline", p.grad_accum_for_baseline);
  put("per_gpu_batch_for_baseline", p.per_gpu_batch_for_baseline);
  j["batch_ratio"] = p.batch_ratio;
  put("lr", p.lr);
  j["lr_rule"] = p.lr ? nlohmann::json(lr_rule_name(p.rule)) : nlohmann::json();
  j["lr_rule_source"] = p.rule_source;
  put("lr_linear", p.lr_linear);
  put("lr_sqrt", p.lr_sqrt);
  put("adam_beta1", p.beta1);
  put("adam_beta2", p.beta2);
  put("adam_eps", p.eps);
  put("warmup_epochs", p.warmup_epochs);
  put("warmup_steps", p.warmup_steps);
  put("steps_per_epoch", p.steps_per_epoch);
  if (p.sampler) {
    j["sampler"] = {{"samples_per_rank", p.sampler->samples_per_rank},
                    {"padded_samples", p.sampler->padded_samples}};
  }
  nlohmann::json warnings = nlohmann::json::array();
  for (const ScalingWarning& w : p.warnings) {
    warnings.push_back({{"code", w.code}, {"message", w.message}, {"fix", w.fix}});
  }
  j["warnings"] = warnings;
  return j;
}

nlohmann::json speedups_json(const std::vector<Speedup>& speedups) {
  nlohmann::json out = nlohmann::json::array();
  for (const Speedup& s : speedups) {
    out.push_back({{"change", s.change},
                   {"how", s.how},
                   {"step_time_s", s.step_s},
                   {"samples_per_s", s.samples_per_s},
                   {"gain", s.gain}});
  }
  return out;
}

nlohmann::json estimate_json(const EstimateHeader& h, const Estimate& e) {
  nlohmann::json j;
  j["model"] = h.model;
  if (!h.hf_config.empty()) j["hf_config"] = h.hf_config;
  if (h.lora) {
    j["lora"] = {{"r", h.lora->rank},
                 {"alpha", h.lora->alpha},
                 {"dropout", h.lora->dropout},
                 {"target", h.lora->target},
                 {"adapter_dtype", h.lora->fp32_adapters ? "fp32" : "base"}};
    if (h.lora->quant != LoraConfig::Quant::kOff) {
      j["lora"]["quant"] = h.lora->quant == LoraConfig::Quant::kNf4 ? "nf4" : "fp4";
      j["lora"]["double_quant"] = h.lora->double_quant;
      j["lora"]["prepare"] = h.lora->prepare;
    }
  }
  j["batch"] = h.batch;
  j["precision"] = precision_name(h.precision);
  j["optimizer"] = optimizer_name(h.optimizer.kind);
  j["optimizer_impl"] = impl_label(h);
  j["notes"] = h.notes;
  if (h.optimizer.weight_decay >= 0) j["weight_decay"] = h.optimizer.weight_decay;
  if (!h.optimizer.preset.empty()) j["optimizer_preset"] = h.optimizer.preset;
  j["grad_accum"] = h.training.grad_accum;
  const DistributedConfig& dist = h.training.distributed;
  if (dist.strategy != Strategy::kSingle) {
    j["world_size"] = dist.world_size;
    j["strategy"] = strategy_name(dist.strategy);
    j["effective_batch"] = h.batch * dist.world_size * h.training.grad_accum;
  }
  if (e.ddp) {
    const auto sizes = [](const std::vector<GradientBucket>& buckets) {
      nlohmann::json a = nlohmann::json::array();
      for (const GradientBucket& b : buckets) a.push_back(b.bytes);
      return a;
    };
    j["ddp"] = {{"bucket_bytes", sizes(e.ddp->buckets)},
                {"rebuilt_bucket_bytes", sizes(e.ddp->rebuilt)},
                {"gradient_as_bucket_view", dist.ddp.gradient_as_bucket_view},
                {"find_unused_parameters", dist.ddp.find_unused_parameters},
                {"broadcast_buffers", dist.ddp.broadcast_buffers}};
    if (!e.ddp->shard_elements.empty()) j["ddp"]["shard_elements"] = e.ddp->shard_elements;
  }
  if (dist.strategy == Strategy::kFsdp) {
    nlohmann::json units = nlohmann::json::array();
    for (const FsdpUnitSize& u : e.fsdp) {
      units.push_back({{"module", u.path},
                       {"flat_bytes", u.flat_bytes},
                       {"padded_bytes", u.padded_bytes},
                       {"shard_bytes", u.shard_bytes}});
    }
    j["fsdp"] = {{"sharding", kFsdpShardingNames.name(dist.fsdp.sharding)},
                 {"wrap", dist.fsdp.wrap},
                 {"mixed_precision", dist.fsdp.mixed_precision_bf16 ? "bf16" : "none"},
                 {"units", units}};
  }
  j["checkpoint"] = h.training.checkpoint;
  j["checkpoint_reentrant"] = h.training.checkpoint_reentrant;
  j["device_profile"] = profile_name(h.device.target);
  j["parameters"] = e.parameters;
  j["trainable_parameters"] = e.trainable_parameters;
  j["activation_bytes"] = e.activation_bytes;
  j["peak_allocated_bytes"] = e.peak_allocated_bytes;
  j["peak_reserved_bytes"] = e.peak_reserved_bytes;
  j["device_used_bytes"] = e.device_used_bytes;
  j["peak_reserved_upper_bytes"] = e.peak_reserved_upper_bytes;
  j["device_used_upper_bytes"] = e.device_used_upper_bytes;
  nlohmann::json sources = nlohmann::json::object();
  for (const WorkspaceSourceRow& row : workspace_source_rows(e)) {
    sources[std::string(row.source)] = {{"calls", row.calls}, {"bytes_at_peak", row.bytes_at_peak}};
  }
  j["workspace_sources"] = sources;
  j["cuda_context_bytes"] = e.cuda_context_bytes;
  if (h.device.target.device == Device::kCuda) {
    j["cuda_context_source"] = kContextSourceNames.name(h.device.context_source);
  }
  if (e.paged_bytes > 0) j["paged_optimizer_state_bytes"] = e.paged_bytes;
  j["peak_phase"] = phase_name(e.peak.phase);
  j["peak_iteration"] = e.peak.iteration + 1;
  j["peak_op"] = e.peak.op;
  j["peak_module"] = e.peak.module;
  nlohmann::json breakdown;
  for (int c = 0; c < kCategoryCount; ++c) {
    breakdown[std::string(category_name(static_cast<Category>(c)))] =
        e.breakdown[static_cast<size_t>(c)];
  }
  breakdown["allocator_cache"] = e.allocator_cache_bytes;
  breakdown["cuda_context"] = e.cuda_context_bytes;
  j["breakdown"] = breakdown;
  nlohmann::json modules = nlohmann::json::object();
  for (const ModuleBytes& m : e.activations_by_module) modules[m.module] = m.bytes;
  j["activations_by_module"] = modules;
  j["num_alloc_retries"] = e.num_alloc_retries;
  if (!e.live_at_peak.empty()) {
    nlohmann::json live = nlohmann::json::array();
    for (const LiveTensor& t : e.live_at_peak) {
      live.push_back({{"bytes", t.bytes},
                      {"category", category_name(t.category)},
                      {"op", t.op},
                      {"module", t.module},
                      {"allocated_in", phase_name(t.phase)}});
    }
    j["live_at_peak"] = live;
  }
  j["events"] = e.events;
  if (e.time) {
    const StepTime& t = *e.time;
    j["tf32"] = h.cost.tf32_matmul;
    j["memory_format"] = kMemoryFormatNames.name(h.cost.memory_format);
    j["step_time_s"] = t.step_s;
    j["samples_per_s"] = t.samples_per_s;
    j["time_breakdown"] = {{"forward_s", t.part(StepPart::kForward)},
                           {"backward_s", t.part(StepPart::kBackward)},
                           {"recompute_s", t.part(StepPart::kRecompute)},
                           {"optimizer_s", t.part(StepPart::kOptimizer)},
                           {"cpu_bound_share", t.cpu_bound_share()},
                           {"gpu_busy_s", t.gpu_only_s},
                           {"host_wait_s", t.cpu_bound_s},
                           {"syncs", t.syncs},
                           {"dominant", kTimeShareNames.name(t.dominant())},
                           {"flops", t.flops},
                           {"achieved_flops_per_s", t.achieved_flops_per_s}};
    for (size_t s = 0; s < kTimeShareCount; ++s) {
      j["time_breakdown"][fmt::format("{}_s", kTimeShareNames.name(static_cast<TimeShare>(s)))] =
          t.share_s[s];
    }
    // Each part's two clocks: the GPU running its kernels and the host issuing them.
    for (size_t p = 0; p < kStepPartCount; ++p) {
      const std::string_view part = kStepPartNames.name(static_cast<StepPart>(p));
      j["time_breakdown"][fmt::format("{}_gpu_s", part)] = t.gpu_s[p];
      j["time_breakdown"][fmt::format("{}_host_s", part)] = t.cpu_s[p];
    }
    if (t.comm) {
      const CommTime& c = *t.comm;
      int64_t bytes = 0;
      for (const BucketTime& b : c.buckets) bytes += b.bytes;
      j["comm_time"] = {{"link", kLinkNames.name(c.link.kind)},
                        {"bus_gbps", c.link.bus_gbps},
                        {"bus_measured", c.link.measured},
                        {"ranks", c.ranks},
                        {"nodes", c.nodes},
                        {"network_gbps", c.network_gbps},
                        {"effective_bus_gbps", c.bus_gbps},
                        {"buckets", c.buckets.size()},
                        {"all_reduce_bytes", bytes},
                        {"all_reduce_s", c.all_reduce_s},
                        {"exposed_s", c.exposed_s},
                        {"broadcast_s", c.serial_s},
                        {"added_s", c.added_s()},
                        {"compute_step_s", t.compute_s},
                        {"scaling_efficiency", t.step_s > 0 ? t.compute_s / t.step_s : 1.0},
                        {"samples_per_s_all_gpus", t.samples_per_s * c.ranks}};
      if (c.sharded) {
        // FSDP: the units' collectives, not DDP's.
        nlohmann::json& k = j["comm_time"];
        k.erase("buckets");
        k.erase("all_reduce_bytes");
        k.erase("all_reduce_s");
        k.erase("broadcast_s");
        k["reduce_scatter_s"] = c.all_reduce_s;
        k["all_gather_s"] = c.serial_s;
      }
    }
    if (const std::optional<TimingCalibration>& c = h.device.calibration) {
      j["gpu_profile"] = {{"file", c->file},
                          {"measured_on", c->measured_on},
                          {"kernels", c->kernels},
                          {"host_bound_kernels", c->host_bound},
                          {"median_error", c->median_error}};
      if (c->catalog_median_error)
        j["gpu_profile"]["catalog_median_error"] = *c->catalog_median_error;
    }
    if (e.epoch) {
      j["dataset_size"] = *h.dataset_size;
      j["epoch_steps"] = e.epoch->steps;
      j["epoch_time_s"] = e.epoch->seconds;
    }
  }
  if (e.total_bytes >= 0) {
    j["gpu"] = {{"name", h.device.gpu},
                {"display", h.device.gpu_display},
                {"total_bytes", e.total_bytes},
                {"sm", h.device.sm}};
    j["margin_bytes"] = e.margin_bytes;
    j["fits"] = e.fits;
    j["fits_upper"] = e.fits_upper;
    j["headroom_bytes"] = e.headroom_bytes;
    if (e.oom) {
      j["oom"] = {{"phase", phase_name(e.oom->phase)},
                  {"iteration", e.oom->iteration + 1},
                  {"op", e.oom->op},
                  {"module", e.oom->module},
                  {"requested_bytes", e.oom_numbers.requested},
                  {"reserved_bytes", e.oom_numbers.reserved},
                  {"allocated_bytes", e.oom_numbers.allocated},
                  {"usable_bytes", e.oom_numbers.capacity},
                  // Where the peak figures come from (Note [Past an OOM]).
                  {"figures_from",
                   e.figures_from == FiguresFrom::kWholeGpu ? "whole_gpu" : "unlimited_memory"}};
    }
  }
  return j;
}

}  // namespace trainfit
