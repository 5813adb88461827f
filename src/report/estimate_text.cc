#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/units.h"
#include "report/format.h"
#include "report/text.h"

namespace trainfit {
namespace {

std::string device_line(const DeviceProfile& d) {
  if (d.target.device == Device::kCpu)
    return "profile cpu (PyTorch 1.13 CPU kernels, exact tensor bytes)";
  if (d.gpu.empty() && d.total_bytes < 0)
    return "profile cuda (PyTorch 2.x), no GPU given (Ampere assumed)";
  if (d.gpu.empty())
    return fmt::format("profile cuda (PyTorch 2.x) on a {} GPU", format_bytes(d.total_bytes));
  return fmt::format("profile cuda (PyTorch 2.x) on {} ({})", d.gpu_display,
                     format_bytes(d.total_bytes));
}

std::string where(const Moment& m) {
  std::string s = fmt::format("{}, iteration {}", phase_name(m.phase), m.iteration + 1);
  if (!m.op.empty()) s += fmt::format(", {} ({})", m.module.empty() ? "-" : m.module, m.op);
  return s;
}

std::string_view time_share_label(TimeShare s) {
  switch (s) {
    case TimeShare::kMath:
      return "GPU math";
    case TimeShare::kMemory:
      return "memory traffic";
    case TimeShare::kLaunch:
      return "kernel launches (per-kernel overhead)";
    case TimeShare::kHost:
      break;
  }
  return "the host (the GPU waits for Python and dispatch)";
}

std::string time_text(const EstimateHeader& h, const StepTime& t,
                      const std::optional<EpochTime>& epoch, const std::vector<Speedup>& speedups) {
  std::string math = h.precision == Precision::kFp32
                         ? (h.cost.tf32_matmul ? "TF32 matmuls and convolutions"
                                               : "fp32 matmuls, TF32 convolutions")
                         : std::string(precision_name(h.precision));
  if (h.cost.memory_format == MemoryFormat::kChannelsLast) math += ", channels_last";
  std::string out = fmt::format("\nStep time on {} ({}; predicted)\n", h.device.gpu_display, math);
  auto line = [&](std::string_view label, std::string_view value, std::string_view note) {
    std::string l = fmt::format("  {:<20}{:>10}  {}", label, value, note);
    while (l.back() == ' ') l.pop_back();
    out += l + '\n';
  };
  if (const std::optional<TimingCalibration>& c = h.device.calibration) {
    out += fmt::format("  constants fitted to {} ({}): median error {:.1f}% over {} timings",
                       c->file, c->measured_on, 100 * c->median_error, c->kernels);
    if (c->catalog_median_error) {
      out += fmt::format(" ({:.1f}% with the catalog's)", 100 * *c->catalog_median_error);
    }
    if (c->host_bound > 0) out += fmt::format("; {} left out as host-bound", c->host_bound);
    out += '\n';
  }
  line("step", format_duration(t.step_s),
       fmt::format("{} samples: {:.1f} samples/s", t.samples, t.samples_per_s));
  if (t.comm) {
    const CommTime& c = *t.comm;
    int64_t bytes = 0;
    for (const BucketTime& b : c.buckets) bytes += b.bytes;
    if (c.sharded) {
      line("communication", format_duration(c.added_s()),
           fmt::format("all-gathers {} before the units' compute; {} of the reduce-scatters' {} "
                       "outlasts backward",
                       format_duration(c.serial_s), format_duration(c.exposed_s),
                       format_duration(c.all_reduce_s)));
    } else {
      line("communication", format_duration(c.added_s()),
           fmt::format(
               "{} of the all-reduce's {} ({} bucket{}, {}) outlasts backward{}",
               format_duration(c.exposed_s), format_duration(c.all_reduce_s), c.buckets.size(),
               c.buckets.size() == 1 ? "" : "s", format_bytes(bytes),
               c.serial_s > 0 ? fmt::format("; broadcasts {}", format_duration(c.serial_s)) : ""));
    }
    line("link", fmt::format("{:.1f} GB/s", c.link.bus_gbps),
         fmt::format("{} bus bandwidth ({}: {})", c.link.display,
                     c.link.measured ? "measured" : "derived", c.link.source));
    if (c.nodes > 1) {
      line("network", fmt::format("{:.1f} GB/s", c.network_gbps),
           fmt::format("between the {} nodes, per node (--network {:g} Gbit/s){}", c.nodes,
                       c.network_gbps * 8,
                       c.bus_gbps < c.link.bus_gbps ? ": the ring's bound" : ""));
    }
    line("scaling", fmt::format("{:.0f}%", t.step_s > 0 ? 100 * t.compute_s / t.step_s : 100),
         fmt::format("of {} GPU{}' compute: {:.1f} samples/s in all", c.ranks,
                     c.ranks == 1 ? "" : "s", t.samples_per_s * c.ranks));
  }
  for (size_t p = 0; p < kStepPartCount; ++p) {
    const auto part = static_cast<StepPart>(p);
    if (part == StepPart::kRecompute && t.part_s[p] == 0) continue;
    line(kStepPartNames.name(part), format_duration(t.part_s[p]),
         t.cpu_s[p] > t.gpu_s[p]
             ? fmt::format("host-bound: the GPU works {}", format_duration(t.gpu_s[p]))
             : "");
  }
  line("GPU busy", format_duration(t.gpu_only_s),
       fmt::format("math {}, memory traffic {}, per-kernel overhead {}",
                   format_duration(t.share(TimeShare::kMath)),
                   format_duration(t.share(TimeShare::kMemory)),
                   format_duration(t.share(TimeShare::kLaunch))));
  line("GPU waits", format_duration(t.cpu_bound_s),
       fmt::format("{:.0f}% of the step, for the host (Python, dispatch, launches{})",
                   100 * t.cpu_bound_share(),
                   t.syncs > 0 ? fmt::format(", {:.0f} .item() reads", t.syncs) : ""));
  line("bound by",
       fmt::format("{:.0f}%", t.step_s > 0 ? 100 * t.share(t.dominant()) / t.step_s : 0),
       fmt::format("of the step: {}", time_share_label(t.dominant())));
  line("GPU throughput", fmt::format("{:.1f}", t.achieved_flops_per_s / 1e12),
       "TFLOP/s achieved over the step");
  if (epoch) {
    const int n = h.training.distributed.world_size;
    line("epoch", format_duration(epoch->seconds),
         n == 1 ? fmt::format("{} samples in {} steps", format_count(*h.dataset_size),
                              format_count(epoch->steps))
                : fmt::format(
                      "{} samples over {} GPUs: {} steps of each rank's {}",
                      format_count(*h.dataset_size), n, format_count(epoch->steps),
                      format_count(
                          distributed_sampler_split(*h.dataset_size, n, false).samples_per_rank)));
  }
  bool first = true;
  for (const Speedup& s : speedups) {
    line(first ? "faster with" : "", fmt::format("{:+.0f}%", 100 * s.gain),
         fmt::format("{} ({}, {:.1f} samples/s): {}", s.change, format_duration(s.step_s),
                     s.samples_per_s, s.how));
    first = false;
  }
  return out;
}

std::string bucket_list(const std::vector<GradientBucket>& buckets) {
  int64_t total = 0;
  for (const GradientBucket& b : buckets) total += b.bytes;
  return fmt::format("{} bucket{} ({})", buckets.size(), buckets.size() == 1 ? "" : "s",
                     format_bytes(total));
}

std::string distributed_text(const EstimateHeader& h, const Estimate& e) {
  const DistributedConfig& d = h.training.distributed;
  if (d.strategy == Strategy::kSingle) return "";
  const int accum = h.training.grad_accum;
  const bool zero = d.strategy == Strategy::kZero1;
  const bool fsdp = d.strategy == Strategy::kFsdp;
  const std::string name = strategy_label(d);
  std::string out = fmt::format(
      "{} over {} GPU{}{}: the figures are {}; effective batch {} ({} x {} GPU{}{})\n", name,
      d.world_size, d.world_size == 1 ? "" : "s",
      d.nodes > 1 ? fmt::format(" ({} nodes of {})", d.nodes, d.world_size / d.nodes) : "",
      zero || fsdp ? "rank 0's" : "one rank's", h.batch * d.world_size * accum, h.batch,
      d.world_size, d.world_size == 1 ? "" : "s",
      accum > 1 ? fmt::format(" x {} micro-batches", accum) : "");
  if (fsdp && !e.fsdp.empty()) {
    int64_t shards = 0;
    const FsdpUnitSize* largest = &e.fsdp.front();
    for (const FsdpUnitSize& u : e.fsdp) {
      shards += u.shard_bytes;
      if (u.padded_bytes > largest->padded_bytes) largest = &u;
    }
    out += fmt::format(
        "FSDP units: {} ({}); parameter shards {}; the largest unit gathered is {} ({})\n",
        e.fsdp.size(),
        d.fsdp.wrap.empty() ? "the whole model: no --fsdp-wrap"
                            : fmt::format("--fsdp-wrap {}", fmt::join(d.fsdp.wrap, ",")),
        format_bytes(shards), format_bytes(largest->padded_bytes),
        largest->path.empty() ? "the root" : largest->path);
    if (d.fsdp.mixed_precision_bf16) {
      out +=
          "FSDP mixed precision bf16: shards, their gradients and the optimizer in fp32; "
          "parameters gathered, computed and gradients reduced in bf16\n";
    }
  }
  if (e.ddp) {
    out += fmt::format("DDP buckets: {} at construction", bucket_list(e.ddp->buckets));
    if (!e.ddp->rebuilt.empty()) {
      out += fmt::format(", {} from the second forward", bucket_list(e.ddp->rebuilt));
    }
    out += d.ddp.gradient_as_bucket_view ? "; .grad views into them\n"
                                         : "; a second copy of the gradients "
                                           "(--gradient-as-bucket-view saves it)\n";
    const std::vector<int64_t>& shards = e.ddp->shard_elements;
    if (!shards.empty()) {
      int64_t total = 0;
      for (int64_t n : shards) total += n;
      const int64_t largest = *std::max_element(shards.begin(), shards.end());
      const auto share = [total](int64_t n) {
        return total > 0 ? 100.0 * static_cast<double>(n) / static_cast<double>(total) : 0.0;
      };
      out += fmt::format(
          "optimizer state sharded: rank 0 steps {:.1f}% of the parameters' elements{}\n",
          share(shards.front()),
          largest > shards.front()
              ? fmt::format(" (the largest shard, {:.1f}%, is another rank's)", share(largest))
              : "");
    }
  }
  return out;
}

std::string scaling_text(const ScalingPlan& p, const EstimateHeader& h) {
  std::string out = "\nBatch and learning rate\n";
  auto line = [&out](std::string_view label, const std::string& value) {
    out += fmt::format("  {:<20}{}\n", label, value);
  };
  line("effective batch", fmt::format("{} per optimizer step", p.effective_batch));
  if (p.lr) {
    line("learning rate",
         fmt::format("{:.4g} ({} rule, k = {:.4g}; linear {:.4g}, square root {:.4g})", *p.lr,
                     lr_rule_name(p.rule), p.batch_ratio, *p.lr_linear, *p.lr_sqrt));
    line("", p.rule_source);
    if (p.beta1) {
      line("Adam", fmt::format("betas ({:.4g}, {:.4g}), eps {:.3g} (from PyTorch's defaults)",
                               *p.beta1, *p.beta2, *p.eps));
    }
    if (p.warmup_epochs) {
      line("warm-up", p.warmup_steps ? fmt::format("{:g} epochs = {} steps", *p.warmup_epochs,
                                                   format_count(*p.warmup_steps))
                                     : fmt::format("{:g} epochs", *p.warmup_epochs));
    }
  }
  if (p.sampler && h.training.distributed.world_size > 1) {
    line("each rank",
         fmt::format("{} samples, {} steps per epoch (DistributedSampler)",
                     format_count(p.sampler->samples_per_rank), format_count(*p.steps_per_epoch)));
  }
  for (const ScalingWarning& w : p.warnings) {
    out += fmt::format("  warning [{}] {}\n    fix: {}\n", w.code, w.message, w.fix);
  }
  return out;
}

}  // namespace

namespace {

// Where the context figure comes from, in a few words.
std::string_view context_note(const DeviceProfile& device) {
  switch (device.context_source) {
    case ContextSource::kMeasured:
      return "measured on this card";
    case ContextSource::kGiven:
      return "--cuda-context";
    case ContextSource::kEstimated:
      break;
  }
  return "estimated";
}

}  // namespace

std::string estimate_text(const EstimateReport& report) {
  const EstimateHeader& h = report.header;
  const Estimate& e = report.estimate;
  const bool cuda = h.device.target.device == Device::kCuda;
  std::string out = fmt::format("{}, batch {}, {}, {}\n{}\n", model_title(h), h.batch,
                                precision_label(h), optimizer_line(h), device_line(h.device));
  if (h.lora) {
    out += fmt::format("{}: {} of {} parameters train\n", lora_label(*h.lora),
                       format_count(e.trainable_parameters), format_count(e.parameters));
  }
  if (!h.optimizer.preset.empty()) out += fmt::format("optimizer: {}\n", h.optimizer.preset);
  out += distributed_text(h, e);
  for (const std::string& note : h.notes) out += fmt::format("note: {}\n", note);
  out += '\n';
  auto line = [&](std::string_view label, int64_t bytes, std::string_view note) {
    std::string l = fmt::format("  {:<20}{:>10}  {}", label, format_bytes(bytes), note);
    while (l.back() == ' ') l.pop_back();
    out += l + '\n';
  };
  line("peak allocated", e.peak_allocated_bytes,
       cuda ? "torch.cuda.max_memory_allocated()" : "peak of live tensor bytes");
  line("peak reserved", e.peak_reserved_bytes,
       cuda ? "torch.cuda.max_memory_reserved()" : "= allocated (no caching allocator)");
  const std::string unmeasured = workspace_bound_reason(e);
  if (!unmeasured.empty()) line("  up to", e.peak_reserved_upper_bytes, unmeasured);
  if (cuda) {
    line("device used", e.device_used_bytes,
         fmt::format("nvidia-smi: reserved + {} CUDA context ({})",
                     format_bytes(e.cuda_context_bytes), context_note(h.device)));
    if (!unmeasured.empty()) {
      line("  up to", e.device_used_upper_bytes, "with those workspaces at their bound");
    }
  }
  line("kept for backward", e.activation_bytes, "at the end of the forward pass");
  out += fmt::format("  {:<20}{}\n", "peak at", where(e.peak));
  if (e.total_bytes >= 0) {
    if (e.oom) {
      out += fmt::format(
          "  {:<20}no: out of memory in {} asking for {} with {} reserved of {} usable\n", "fits",
          where(*e.oom), format_bytes(e.oom_numbers.requested),
          format_bytes(e.oom_numbers.reserved), format_bytes(e.oom_numbers.capacity));
      if (e.figures_from == FiguresFrom::kWholeGpu) {
        out += fmt::format("  {:<20}the figures above are the run's with all {}, where it fits\n",
                           "", format_bytes(e.total_bytes));
      } else if (e.figures_from == FiguresFrom::kUnlimited) {
        out += fmt::format(
            "  {:<20}the figures above are the run's on a GPU with unlimited memory: it does "
            "not fit all {} either\n",
            "", format_bytes(e.total_bytes));
      }
    } else {
      const std::string of =
          e.margin_bytes > 0
              ? fmt::format("{} ({} of {} kept free)", format_bytes(e.total_bytes - e.margin_bytes),
                            format_bytes(e.margin_bytes), format_bytes(e.total_bytes))
              : format_bytes(e.total_bytes);
      out += e.fits ? fmt::format("  {:<20}yes, {} headroom of {}\n", "fits",
                                  format_bytes(e.headroom_bytes), of)
                    : fmt::format("  {:<20}no, {} over {}\n", "fits",
                                  format_bytes(-e.headroom_bytes), of);
      if (e.fits && !e.fits_upper) {
        out += fmt::format(
            "  {:<20}not at the bound: the unmeasured workspaces could take {} "
            "more (trainfit fit decides by the bound)\n",
            "", format_bytes(e.device_used_upper_bytes - e.device_used_bytes));
      }
    }
  }
  if (e.time) out += time_text(h, *e.time, e.epoch, report.speedups);
  out += "\nAt the peak\n";
  const std::pair<Category, const char*> rows[] = {
      {Category::kParameter, "parameters"},           {Category::kGradient, "gradients"},
      {Category::kOptimizerState, "optimizer state"}, {Category::kActivation, "activations"},
      {Category::kTemporary, "temporaries"},          {Category::kInput, "inputs"},
      {Category::kWorkspace, "workspaces"},           {Category::kCommunication, "communication"}};
  int64_t total = 0;
  for (const auto& [c, label] : rows) {
    const int64_t bytes = e.breakdown[static_cast<size_t>(c)];
    if (c == Category::kCommunication && bytes == 0) continue;  // one GPU
    total += bytes;
    line(label, bytes, "");
    if (c == Category::kActivation) {
      const std::vector<ModuleBytes> shown = largest_first(e.activations_by_module);
      size_t width = 18;
      for (const ModuleBytes& m : shown) width = std::max(width, m.module.size() + 2);
      for (const ModuleBytes& m : shown) {
        out += fmt::format("    {:<{}}{:>10}\n", m.module, width, format_bytes(m.bytes));
      }
    }
    // Note [Workspace bounds]: which of the cuDNN workspaces alive at the peak were measured.
    if (c == Category::kWorkspace && e.unmeasured_workspace_calls() > 0) {
      for (const WorkspaceSourceRow& row : workspace_source_rows(e)) {
        if (row.bytes_at_peak == 0) continue;
        out += fmt::format("    {:<18}{:>10}  cuDNN, {} on this GPU\n", row.source,
                           format_bytes(row.bytes_at_peak),
                           row.source == "measured" ? "measured" : "not measured");
      }
    }
  }
  if (cuda) {
    line("allocator cache", e.allocator_cache_bytes,
         "reserved but free (peak reserved - peak allocated)");
    line("CUDA context", e.cuda_context_bytes,
         fmt::format("outside PyTorch's allocator ({})", context_note(h.device)));
    total += e.allocator_cache_bytes + e.cuda_context_bytes;
  }
  line("total", total, cuda ? "= device used" : "= peak allocated");
  if (e.paged_bytes > 0) {
    line("paged state", e.paged_bytes,
         "optimizer state in unified memory, not in the total: on the GPU while it has room, "
         "moved to the host when it has not");
  }
  if (report.scaling) out += scaling_text(*report.scaling, h);
  if (!e.live_at_peak.empty()) {
    out += fmt::format("\nLargest of the {} tensors alive at the peak\n", e.live_at_peak.size());
    const size_t shown = std::min<size_t>(e.live_at_peak.size(), 25);
    for (size_t i = 0; i < shown; ++i) {
      const LiveTensor& t = e.live_at_peak[i];
      out += fmt::format("  {:>10}  {:<16} {:<9} {}{}\n", format_bytes(t.bytes),
                         category_name(t.category), phase_name(t.phase), t.module,
                         t.op.empty() ? "" : fmt::format(" ({})", t.op));
    }
  }
  return out;
}

}  // namespace trainfit
