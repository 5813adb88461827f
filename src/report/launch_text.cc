#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/units.h"
#include "estimate/zero_formulas.h"
#include "pipeline/request_options.h"
#include "report/format.h"
#include "report/text.h"

namespace trainfit {
namespace {

std::string batch_line(const LaunchCandidate& c) {
  std::string s =
      fmt::format("{} per GPU x {} GPU{}", c.per_gpu_batch, c.gpus, c.gpus == 1 ? "" : "s");
  if (c.grad_accum > 1) s += fmt::format(" x {} micro-batches", c.grad_accum);
  return s;
}

std::string config_line(const LaunchCandidate& c) {
  return fmt::format("{} GPU{}{}, {}", c.gpus, c.gpus == 1 ? "" : "s",
                     c.gpus == 1 ? "" : fmt::format(" ({})", strategy_name(c.strategy)),
                     batch_line(c));
}

}  // namespace

std::string launch_text(const LaunchReport& r) {
  const LaunchPlan& p = r.plan;
  std::string out = fmt::format(
      "{} on {}: the baseline's batch of {} on up to {} GPU{}\n"
      "(step times include the gradients' all-reduce over {} at {:.1f} GB/s, {}: {})\n\n",
      r.model, r.gpu, p.baseline_batch, r.options.max_gpus, r.options.max_gpus == 1 ? "" : "s",
      r.link.display, r.link.bus_gbps, r.link.measured ? "measured" : "derived", r.link.source);
  out += fmt::format("  {:>4}  {:<8}  {:>7}  {:>13}  {:<4}  {:>11}  {:>9}  {:>11}\n", "GPUs",
                     "strategy", "per GPU", "micro-batches", "fits", "device used", "step",
                     "GPU-seconds");
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    const LaunchCandidate& c = p.candidates[i];
    std::string mark;
    if (p.fastest == i) mark = "fastest";
    if (p.cheapest == i) mark += mark.empty() ? "cheapest" : ", cheapest";
    out += fmt::format("  {:>4}  {:<8}  {:>7}  {:>13}  {:<4}  {:>11}  {:>9}  {:>11.3f}", c.gpus,
                       strategy_name(c.strategy), c.per_gpu_batch, c.grad_accum,
                       c.fits ? "yes" : "no", format_bytes(c.estimate.device_used_bytes),
                       format_duration(c.step_s), c.gpu_seconds());
    out += mark.empty() ? "\n" : fmt::format("  {}\n", mark);
  }
  if (!p.fastest || !r.chosen) {
    const LaunchCandidate& last = p.candidates.back();
    out += fmt::format(
        "\nNothing fits: at {} the {} needs {} of {}. A card with more memory, or sharding the "
        "model's states (FSDP or ZeRO-3, not modelled by trainfit yet",
        batch_line(last), last.gpus == 1 ? "GPU" : "rank",
        format_bytes(last.estimate.device_used_bytes), format_bytes(last.estimate.total_bytes));
    const double psi = static_cast<double>(last.estimate.trainable_parameters);
    if (last.gpus > 1 && psi > 0) {
      // The ZeRO paper's count for mixed-precision Adam: 16 bytes a parameter, all sharded.
      out += fmt::format(
          ": over {} GPUs, ZeRO-3 keeps {} of parameters, gradients and Adam state per GPU "
          "against {} unsharded, by the ZeRO paper's count for mixed precision, before "
          "activations",
          last.gpus,
          format_bytes(
              static_cast<int64_t>(zero_paper_bytes(psi, ZeroStage::kOsGradParams, last.gpus))),
          format_bytes(static_cast<int64_t>(zero_paper_bytes(psi, ZeroStage::kNone, 1))));
    }
    out += ")\n";
    return out;
  }
  const LaunchCandidate& c = p.candidates[*p.fastest];
  const ScalingPlan& s = *r.chosen->scaling;
  out += fmt::format("\nPlan: {} = {} per optimizer step", config_line(c), s.effective_batch);
  out += s.effective_batch == p.baseline_batch ? " (the baseline's)\n" : "\n";
  const auto line = [&out](std::string_view label, const std::string& value) {
    out += fmt::format("  {:<18}{}\n", label, value);
  };
  if (s.lr) {
    line("learning rate", fmt::format("{:.4g} ({} rule)", *s.lr, lr_rule_name(s.rule)));
  }
  line("step", fmt::format("{} ({}), {:.1f} samples/s", format_duration(c.step_s),
                           c.grad_accum > 1 ? "all micro-batches" : "one batch",
                           static_cast<double>(s.effective_batch) / c.step_s));
  line("device used", fmt::format("{} per GPU ({} allocated at the peak)",
                                  format_bytes(c.estimate.device_used_bytes),
                                  format_bytes(c.estimate.peak_allocated_bytes)));
  if (p.cheapest != p.fastest) {
    const LaunchCandidate& k = p.candidates[*p.cheapest];
    line("cheapest", fmt::format("{}: {} a step, {:.3f} GPU-seconds against {:.3f}", config_line(k),
                                 format_duration(k.step_s), k.gpu_seconds(), c.gpu_seconds()));
  }
  out += fmt::format("\nRun it\n  {}\n", r.command);
  for (const std::string& e : r.environment) out += fmt::format("  - {}\n", e);
  out += "\nWhat the training script needs\n";
  for (const std::string& change : r.code_changes) out += fmt::format("  - {}\n", change);
  for (const ScalingWarning& w : s.warnings) {
    if (w.code == "batchnorm_small_batch" || w.code == "sampler_set_epoch") continue;  // above
    out += fmt::format("  warning [{}] {}\n    fix: {}\n", w.code, w.message, w.fix);
  }
  out += fmt::format("\nCheck it: {}\n", command_line(request_args(p.request)));
  return out;
}

}  // namespace trainfit
