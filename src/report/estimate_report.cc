#include "report/estimate_report.h"

#include <fmt/format.h>

#include "graph/op_schema.h"
#include "lower/optimizer_step.h"
#include "report/format.h"
#include "report/summary_report.h"

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

}  // namespace

std::string_view impl_label(const EstimateHeader& h) {
  return is_8bit(h.optimizer.kind) ? "bitsandbytes" : optimizer_impl_name(h.resolved_impl);
}

std::string optimizer_line(const EstimateHeader& h) {
  std::string s = fmt::format("{} ({})", optimizer_name(h.optimizer.kind), impl_label(h));
  if (h.optimizer.weight_decay >= 0)
    s += fmt::format(", weight_decay {:g}", h.optimizer.weight_decay);
  if (h.training.grad_accum > 1)
    s += fmt::format(", {} micro-batches per step", h.training.grad_accum);
  return s;
}

std::string estimate_text(const EstimateHeader& h, const Estimate& e) {
  const bool cuda = h.device.target.device == Device::kCuda;
  std::string out =
      fmt::format("{}, batch {}, {}, {}\n{}\n", h.model, h.batch, precision_name(h.precision),
                  optimizer_line(h), device_line(h.device));
  if (!h.optimizer.preset.empty()) out += fmt::format("optimizer: {}\n", h.optimizer.preset);
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
  out += "\nAt the peak\n";
  const std::pair<Category, const char*> rows[] = {{Category::kParameter, "parameters"},
                                                   {Category::kGradient, "gradients"},
                                                   {Category::kOptimizerState, "optimizer state"},
                                                   {Category::kActivation, "activations"},
                                                   {Category::kTemporary, "temporaries"},
                                                   {Category::kInput, "inputs"},
                                                   {Category::kWorkspace, "workspaces"}};
  int64_t total = 0;
  for (const auto& [c, label] : rows) {
    const int64_t bytes = e.breakdown[static_cast<size_t>(c)];
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

nlohmann::json estimate_json(const EstimateHeader& h, const Estimate& e) {
  nlohmann::json j;
  j["model"] = h.model;
  j["batch"] = h.batch;
  j["precision"] = precision_name(h.precision);
  j["optimizer"] = optimizer_name(h.optimizer.kind);
  j["optimizer_impl"] = impl_label(h);
  j["notes"] = h.notes;
  if (h.optimizer.weight_decay >= 0) j["weight_decay"] = h.optimizer.weight_decay;
  if (!h.optimizer.preset.empty()) j["optimizer_preset"] = h.optimizer.preset;
  j["grad_accum"] = h.training.grad_accum;
  j["checkpoint"] = h.training.checkpoint;
  j["device_profile"] = profile_name(h.device.target);
  j["parameters"] = e.parameters;
  j["trainable_parameters"] = e.trainable_parameters;
  j["activation_bytes"] = e.activation_bytes;
  j["peak_allocated_bytes"] = e.peak_allocated_bytes;
  j["peak_reserved_bytes"] = e.peak_reserved_bytes;
  j["device_used_bytes"] = e.device_used_bytes;
  j["cuda_context_bytes"] = e.cuda_context_bytes;
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
  if (e.total_bytes >= 0) {
    j["gpu"] = {{"name", h.device.gpu},
                {"display", h.device.gpu_display},
                {"total_bytes", e.total_bytes},
                {"sm", h.device.sm}};
    j["margin_bytes"] = e.margin_bytes;
    j["fits"] = e.fits;
    j["headroom_bytes"] = e.headroom_bytes;
    if (e.oom) {
      j["oom"] = {{"phase", phase_name(e.oom->phase)},
                  {"iteration", e.oom->iteration + 1},
                  {"op", e.oom->op},
                  {"module", e.oom->module},
                  {"requested_bytes", e.oom_numbers.requested},
                  {"reserved_bytes", e.oom_numbers.reserved},
                  {"allocated_bytes", e.oom_numbers.allocated},
                  {"usable_bytes", e.oom_numbers.capacity}};
    }
  }
  return j;
}

std::string timeline_csv(const EventNames& names, const Estimate& e) {
  std::string out = "event,iteration,phase,module,op,allocated_bytes,reserved_bytes\n";
  for (size_t i = 0; i < e.timeline.size(); ++i) {
    const TimelinePoint& p = e.timeline[i];
    std::string module, op;
    if (p.node != kNone) {
      op = names.op(p.node);
      const ModuleId m = names.node_module(p.node);
      if (m != kNone) module = names.module(m);
    }
    out += fmt::format("{},{},{},{},{},{},{}\n", i, p.iteration + 1, phase_name(p.phase), module,
                       op, p.allocated, p.reserved);
  }
  return out;
}

}  // namespace trainfit
