#include <fmt/format.h>

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

std::string time_text(const EstimateHeader& h, const StepTime& t,
                      const std::optional<EpochTime>& epoch) {
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
    out += fmt::format("  constants fitted to {} ({}): median error {:.1f}% over its {} timings",
                       c->file, c->measured_on, 100 * c->median_error, c->kernels);
    if (c->catalog_median_error) {
      out += fmt::format(" ({:.1f}% with the catalog's)", 100 * *c->catalog_median_error);
    }
    out += '\n';
  }
  line("step", format_duration(t.step_s),
       fmt::format("{} samples: {:.1f} samples/s", t.samples, t.samples_per_s));
  if (h.training.distributed.strategy != Strategy::kSingle) {
    out += "  (one GPU's compute: the gradients' all-reduce is not in the step time yet)\n";
  }
  for (size_t p = 0; p < kStepPartCount; ++p) {
    const auto part = static_cast<StepPart>(p);
    if (part == StepPart::kRecompute && t.part_s[p] == 0) continue;
    line(kStepPartNames.name(part), format_duration(t.part_s[p]),
         t.cpu_s[p] > t.gpu_s[p]
             ? fmt::format("CPU-bound: the GPU works {}", format_duration(t.gpu_s[p]))
             : "");
  }
  line("CPU-bound", fmt::format("{:.0f}%", 100 * t.cpu_bound_share()),
       "of the step, eager dispatch outpacing the GPU");
  line("GPU throughput", fmt::format("{:.1f}", t.achieved_flops_per_s / 1e12),
       "TFLOP/s achieved over the step");
  if (epoch) {
    line("epoch", format_duration(epoch->seconds),
         fmt::format("{} samples in {} steps", format_count(*h.dataset_size),
                     format_count(epoch->steps)));
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
  std::string out = fmt::format(
      "{} over {} GPU{}: the figures are one rank's; effective batch {} ({} x {} GPU{}{})\n", "DDP",
      d.world_size, d.world_size == 1 ? "" : "s", h.batch * d.world_size * accum, h.batch,
      d.world_size, d.world_size == 1 ? "" : "s",
      accum > 1 ? fmt::format(" x {} micro-batches", accum) : "");
  if (e.ddp) {
    out += fmt::format("DDP buckets: {} at construction", bucket_list(e.ddp->buckets));
    if (!e.ddp->rebuilt.empty()) {
      out += fmt::format(", {} from the second forward", bucket_list(e.ddp->rebuilt));
    }
    out += d.ddp.gradient_as_bucket_view ? "; .grad views into them\n"
                                         : "; a second copy of the gradients "
                                           "(--gradient-as-bucket-view saves it)\n";
  }
  return out;
}

}  // namespace

std::string estimate_text(const EstimateReport& report) {
  const EstimateHeader& h = report.header;
  const Estimate& e = report.estimate;
  const bool cuda = h.device.target.device == Device::kCuda;
  std::string out =
      fmt::format("{}, batch {}, {}, {}\n{}\n", h.model, h.batch, precision_name(h.precision),
                  optimizer_line(h), device_line(h.device));
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
  if (cuda) {
    line("device used", e.device_used_bytes,
         fmt::format("nvidia-smi: reserved + {} CUDA context (estimated)",
                     format_bytes(e.cuda_context_bytes)));
  }
  line("kept for backward", e.activation_bytes, "at the end of the forward pass");
  out += fmt::format("  {:<20}{}\n", "peak at", where(e.peak));
  if (e.total_bytes >= 0) {
    if (e.oom) {
      out += fmt::format(
          "  {:<20}no: out of memory in {} asking for {} with {} reserved of {} usable\n", "fits",
          where(*e.oom), format_bytes(e.oom_numbers.requested),
          format_bytes(e.oom_numbers.reserved), format_bytes(e.oom_numbers.capacity));
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
    }
  }
  if (e.time) out += time_text(h, *e.time, e.epoch);
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
  }
  if (cuda) {
    line("allocator cache", e.allocator_cache_bytes,
         "reserved but free (peak reserved - peak allocated)");
    line("CUDA context", e.cuda_context_bytes, "outside PyTorch's allocator (estimated)");
    total += e.allocator_cache_bytes + e.cuda_context_bytes;
  }
  line("total", total, cuda ? "= device used" : "= peak allocated");
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
