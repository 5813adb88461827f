#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/units.h"
#include "pipeline/request_options.h"
#include "report/format.h"
#include "report/table.h"
#include "report/text.h"

namespace trainfit {
namespace {

constexpr size_t kWidth = 160;

std::string max_batch_text(const BatchFit& f) {
  return f.at_search_limit ? fmt::format(">= {}", f.max_batch) : std::to_string(f.max_batch);
}

// A change in step time: "+10.4%", "-31.0%"; "-" where there is none.
std::string change_text(std::optional<double> change) {
  return change ? fmt::format("{:+.1f}%", 100 * *change) : "-";
}

std::string step_text(const Estimate& e) {
  return e.time ? format_duration(e.time->step_s) : "-";
}

std::string describe(const FitReport& r) {
  const EstimateHeader& h = r.header;
  std::string s = model_title(h);
  if (!r.sets.empty()) {
    std::vector<std::string> sets;
    for (const auto& [k, v] : r.sets) sets.push_back(fmt::format("{}={}", k, v));
    s += fmt::format(" ({})", fmt::join(sets, ", "));
  }
  s += fmt::format(", {}, {}", precision_label(h), optimizer_line(h));
  if (!h.training.checkpoint.empty()) {
    s += fmt::format(", checkpoint {}{}", fmt::join(h.training.checkpoint, " "),
                     h.training.checkpoint_reentrant ? " (reentrant)" : "");
  }
  if (!r.freeze.empty()) s += fmt::format(", freeze {}", fmt::join(r.freeze, " "));
  if (h.lora) s += ", " + lora_label(*h.lora);
  if (const DistributedConfig& d = h.training.distributed; d.strategy != Strategy::kSingle) {
    s += fmt::format(
        ", {} over {} GPUs (batches are per GPU; the effective batch is {} times "
        "larger)",
        strategy_label(d), d.world_size, d.world_size * h.training.grad_accum);
  }
  return s;
}

std::string budget_line(const FitReport& r) {
  const DeviceProfile& d = r.device;
  return fmt::format("{} ({}), {} kept free: budget {}",
                     d.gpu_display.empty() ? "GPU" : d.gpu_display, format_bytes(d.total_bytes),
                     format_bytes(r.margin_bytes), format_bytes(d.total_bytes - r.margin_bytes));
}

std::string every_gpu_text(const FitReport& r) {
  TextTable t({{"GPU", Align::kLeft, true},
               {"memory", Align::kRight, false},
               {"budget", Align::kRight, false},
               {"max batch", Align::kRight, false},
               {"device used", Align::kRight, false},
               {"next batch needs", Align::kRight, false},
               {"step", Align::kRight, false},
               {"samples/s", Align::kRight, false}});
  for (const GpuFit& g : r.gpus) {
    const BatchFit& fit = g.fit;
    t.add_row({fmt::format("{} ({})", g.gpu.name, g.gpu.display), format_bytes(g.gpu.total_bytes),
               format_bytes(fit.budget_bytes), max_batch_text(fit),
               fit.max_batch > 0 ? format_bytes(fit.device_used_bytes) : "-",
               fit.at_search_limit ? "-" : next_batch_needs(fit, g.gpu.total_bytes),
               g.time ? format_duration(g.time->step_s) : "-",
               g.time ? fmt::format("{:.0f}", g.time->samples_per_s) : "-"});
  }
  std::string notes;
  for (const GpuFit& g : r.gpus) {
    if (g.fit.central_max_batch == g.fit.max_batch) continue;
    notes += fmt::format("{}: the central figure alone would allow batch {}\n", g.gpu.name,
                         g.fit.central_max_batch);
  }
  if (!notes.empty()) {
    notes =
        "\nDecided by the bound, where cuDNN workspaces no recording measured could need "
        "more:\n" +
        notes;
  }
  return describe(r) + '\n' +
         fmt::format(
             "largest batch per GPU, {:g}% of each GPU's memory kept free ({} "
             "estimates); step time and samples/s predicted at that batch{}\n\n",
             100 * r.margin, r.estimates, r.rank == Rank::kTime ? "; fastest first" : "") +
         t.render(kWidth) + notes;
}

std::string largest_batch_text(const BatchFit& fit, int64_t total_bytes) {
  if (fit.max_batch == 0) {
    return fmt::format("  batch 1 does not fit: it needs {}\n",
                       next_batch_needs_long(fit, total_bytes));
  }
  std::string s =
      fmt::format("  {:<18}{}   device used {} (peak allocated {}, reserved {})\n", "largest batch",
                  max_batch_text(fit), format_bytes(fit.device_used_bytes),
                  format_bytes(fit.peak_allocated_bytes), format_bytes(fit.peak_reserved_bytes));
  if (fit.alloc_retries > 0) {
    s += fmt::format(
        "  {:<18}fits only by freeing the allocator's cache mid-step ({} "
        "retries): slower\n",
        "note", fit.alloc_retries);
  }
  if (fit.device_used_upper_bytes > fit.device_used_bytes) {
    s += fmt::format(
        "  {:<18}device used up to {} with the workspaces no recording measured at "
        "their bound, which decides\n",
        "", format_bytes(fit.device_used_upper_bytes));
  }
  if (fit.central_max_batch != fit.max_batch) {
    s += fmt::format(
        "  {:<18}the central figure alone would allow batch {}: unmeasured cuDNN "
        "workspaces could need more\n",
        "note", fit.central_max_batch);
  }
  if (!fit.at_search_limit) {
    s += fmt::format("  {:<18}needs {}\n", fmt::format("batch {}", fit.max_batch + 1),
                     next_batch_needs_long(fit, total_bytes));
  }
  return s;
}

std::string what_if_text(const WhatIfReport& w, const BatchFit& base_fit, Rank rank) {
  const Estimate& base = w.what_if.base;
  const bool timed = base.time.has_value();  // no step time for a trace or an unknown card
  std::string s = fmt::format(
      "\nEach knob alone at batch {}: peak allocated, device used, saved device memory and the "
      "largest batch with it\n({}).{}\nCost: recompute as a share of the step's FLOPs, or what "
      "else changes.\n\n",
      w.batch, rank == Rank::kTime && timed ? "fastest first" : "largest batch first",
      timed ? " Step and time: the predicted step time and its change." : "");
  std::vector<Column> columns = {{"knob", Align::kLeft, false},
                                 {"allocated", Align::kRight, false},
                                 {"device used", Align::kRight, false},
                                 {"saves", Align::kRight, false},
                                 {"max batch", Align::kRight, false}};
  if (timed) {
    columns.push_back({"step", Align::kRight, false});
    columns.push_back({"time", Align::kRight, false});
  }
  columns.push_back({"cost", Align::kLeft, false});
  columns.push_back({"change", Align::kLeft, true});
  TextTable t(std::move(columns));
  const auto add = [&](std::vector<std::string> memory, const Estimate& e,
                       std::optional<double> change, std::vector<std::string> rest) {
    if (timed) {
      memory.push_back(step_text(e));
      memory.push_back(change_text(change));
    }
    memory.insert(memory.end(), rest.begin(), rest.end());
    t.add_row(std::move(memory));
  };
  add({"(as given)", format_bytes(base.peak_allocated_bytes), format_bytes(base.device_used_bytes),
       "-", max_batch_text(base_fit)},
      base, std::nullopt, {"-", "-"});
  for (const WhatIfRow& row : w.what_if.rows) {
    const int64_t saved = base.device_used_bytes - row.estimate.device_used_bytes;
    add({row.knob.name, format_bytes(row.estimate.peak_allocated_bytes),
         format_bytes(row.estimate.device_used_bytes),
         saved >= 0 ? format_bytes(saved) : fmt::format("-{}", format_bytes(-saved)),
         max_batch_text(row.fit)},
        row.estimate, row.step_change, {row.knob.cost, join_words(row.knob.change.args)});
  }
  s += t.render(kWidth);
  for (const auto& [name, why] : w.what_if.skipped) {
    s += fmt::format("not applicable: {}: {}\n", name, why);
  }
  return s;
}

std::string curve_text(const std::vector<BatchPoint>& curve, const BatchFit& fit) {
  TextTable t({{"batch", Align::kRight},
               {"peak allocated", Align::kRight},
               {"peak reserved", Align::kRight},
               {"device used", Align::kRight},
               {"", Align::kLeft}});
  for (const BatchPoint& p : curve) {
    t.add_row({std::to_string(p.batch), format_bytes(p.peak_allocated_bytes),
               format_bytes(p.peak_reserved_bytes), format_bytes(p.device_used_bytes),
               p.batch == fit.max_batch                  ? "largest that fits"
               : p.device_used_bytes <= fit.budget_bytes ? ""
               : p.batch < fit.max_batch                 ? "fits by freeing the allocator's cache"
                                                         : "over the budget"});
  }
  return "\nMemory against batch size (no limit)\n" + t.render(100);
}

// The plan's step time against the request as given at the target batch (which does not fit).
std::string time_line(const TargetPlan& p) {
  if (!p.estimate.time || !p.step_change) return "";
  return fmt::format("  step {} ({:.0f} samples/s): {} time per sample against batch {} as given\n",
                     format_duration(p.estimate.time->step_s), p.estimate.time->samples_per_s,
                     change_text(p.step_change), p.target);
}

std::string target_text(const TargetPlan& p, Rank rank) {
  std::string s = fmt::format("\nBatch {}: ", p.target);
  if (p.fits && p.knobs.empty()) {
    return s + fmt::format("fits as given ({} device used{}).\n",
                           format_bytes(p.estimate.device_used_bytes),
                           p.estimate.time
                               ? fmt::format(", step {}", format_duration(p.estimate.time->step_s))
                               : "");
  }
  s += fmt::format("does not fit as given (needs {}).\n",
                   format_bytes(p.as_given.device_used_bytes));
  if (p.fits) {
    std::vector<std::string> names;
    double recompute = 0;
    for (const Knob& k : p.knobs) {
      names.push_back(k.name);
      recompute += k.recompute;
    }
    s += fmt::format("  {} combination ({} estimates): {}\n",
                     rank == Rank::kTime ? "fastest" : "cheapest", p.combinations_tried,
                     fmt::join(names, " + "));
    s += fmt::format("  device used {}; recompute {:.1f}% of step FLOPs\n",
                     format_bytes(p.estimate.device_used_bytes), 100 * recompute);
    s += time_line(p);
    s += fmt::format("  {}\n", command_line(request_args(p.request)));
    return s;
  }
  s += fmt::format("  no combination of the allowed knobs fits it ({} estimates).\n",
                   p.combinations_tried);
  if (p.micro_batch == 0) return s + "  not even batch 1 fits with gradient accumulation.\n";
  if (!p.accumulation_estimated) return s + "  " + unplanned_accumulation(p) + "\n";
  s += fmt::format(
      "  gradient accumulation: micro-batch {} x {} steps = effective batch {}, device used {}\n",
      p.micro_batch, p.accumulation, p.effective_batch, format_bytes(p.estimate.device_used_bytes));
  s += time_line(p);
  s += fmt::format("  {}\n", command_line(request_args(p.request)));
  return s;
}

}  // namespace

std::string fit_text(const FitReport& r) {
  if (!r.gpus.empty()) return every_gpu_text(r);
  std::string s = describe(r) + '\n' + budget_line(r) + "\n\n" +
                  largest_batch_text(r.fit, r.device.total_bytes);
  if (!r.curve.empty()) s += curve_text(r.curve, r.fit);
  if (r.what_if) s += what_if_text(*r.what_if, r.fit, r.rank);
  if (r.target) s += target_text(*r.target, r.rank);
  return s;
}

}  // namespace trainfit
