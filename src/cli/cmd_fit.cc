// trainfit fit: the largest batch that fits a GPU (or every catalog GPU), what each memory knob
// saves and costs (--what-if), and the cheapest way to fit a target batch (--target-batch).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/plan.h"
#include "report/table.h"

namespace trainfit {
namespace {

struct FitFlags {
  EstimateFlags estimate;
  bool batch_given = false;
  bool what_if = false;
  int64_t target_batch = 0;
  bool allow_model_changes = false;
  bool json = false;
};

constexpr size_t kWidth = 160;

// A shell-safe argument: quoted when it holds a glob or other special character.
std::string shell_word(const std::string& arg) {
  const bool plain = std::all_of(arg.begin(), arg.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-_.=,%/:+").find(c) != std::string_view::npos;
  });
  return plain && !arg.empty() ? arg : fmt::format("'{}'", arg);
}

std::string join_words(const std::vector<std::string>& args) {
  std::vector<std::string> words;
  words.reserve(args.size());
  for (const std::string& a : args) words.push_back(shell_word(a));
  return fmt::format("{}", fmt::join(words, " "));
}

std::string command_line(const EstimateFlags& flags) {
  return "trainfit estimate " + join_words(estimate_args(flags));
}

std::string max_batch_text(const BatchFit& f) {
  return f.at_search_limit ? fmt::format(">= {}", f.max_batch) : std::to_string(f.max_batch);
}

nlohmann::json fit_json(const BatchFit& f) {
  nlohmann::json j{{"max_batch", f.max_batch},
                   {"budget_bytes", f.budget_bytes},
                   {"at_search_limit", f.at_search_limit}};
  if (f.max_batch > 0) {
    j["peak_allocated_bytes"] = f.peak_allocated_bytes;
    j["peak_reserved_bytes"] = f.peak_reserved_bytes;
    j["device_used_bytes"] = f.device_used_bytes;
    j["alloc_retries"] = f.alloc_retries;
  }
  if (!f.at_search_limit) j["next_batch_device_used_bytes"] = f.next_device_used_bytes;
  return j;
}

std::string describe(const EstimateFlags& flags, const ResolvedEstimate& r) {
  const EstimateHeader h = header_of(r);
  std::string s = h.model;
  if (!r.request.sets.empty()) {
    std::vector<std::string> sets;
    for (const auto& [k, v] : r.request.sets) sets.push_back(fmt::format("{}={}", k, v));
    s += fmt::format(" ({})", fmt::join(sets, ", "));
  }
  s += fmt::format(", {}, {}", precision_name(h.precision), optimizer_line(h));
  if (!h.training.checkpoint.empty()) {
    s += fmt::format(", checkpoint {}", fmt::join(h.training.checkpoint, " "));
  }
  if (!flags.source.freeze.empty())
    s += fmt::format(", freeze {}", fmt::join(flags.source.freeze, " "));
  return s;
}

std::string budget_line(const DeviceProfile& d) {
  return fmt::format("{} ({}), {} kept free: budget {}",
                     d.gpu_display.empty() ? "GPU" : d.gpu_display, format_bytes(d.total_bytes),
                     format_bytes(d.margin_bytes), format_bytes(d.total_bytes - d.margin_bytes));
}

// --gpu all: one row per catalog GPU.
int run_all(const FitFlags& o, const std::string& margin, std::ostream& out, std::ostream& err) {
  Result<BatchSearch> search = BatchSearch::create(o.estimate);
  if (!search.ok()) return report_error(err, search.status());
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json by_name = nlohmann::json::object();
  TextTable t({{"GPU", Align::kLeft, true},
               {"memory", Align::kRight, false},
               {"budget", Align::kRight, false},
               {"max batch", Align::kRight, false},
               {"device used", Align::kRight, false},
               {"next batch needs", Align::kRight, false}});
  for (const GpuSpec& gpu : gpu_catalog()) {
    EstimateFlags f = o.estimate;
    f.device.gpu = std::string(gpu.name);
    f.device.margin = margin;
    Result<ResolvedEstimate> r = resolve_flags(f);
    if (!r.ok()) return report_error(err, r.status());
    Result<BatchFit> fit = search->fit(r->options.device);
    if (!fit.ok()) return report_error(err, fit.status());
    nlohmann::json j = fit_json(*fit);
    j["gpu"] = gpu.name;
    j["display"] = gpu.display;
    j["total_bytes"] = gpu.total_bytes;
    rows.push_back(j);
    by_name[std::string(gpu.name)] = fit->max_batch;
    t.add_row({fmt::format("{} ({})", gpu.name, gpu.display), format_bytes(gpu.total_bytes),
               format_bytes(fit->budget_bytes), max_batch_text(*fit),
               fit->max_batch > 0 ? format_bytes(fit->device_used_bytes) : "-",
               fit->at_search_limit ? "-" : format_bytes(fit->next_device_used_bytes)});
  }
  if (o.json) {
    out << nlohmann::json{{"max_batch", by_name},
                          {"gpus", rows},
                          {"estimates", search->estimates()}}
               .dump(2)
        << '\n';
    return kExitOk;
  }
  Result<ResolvedEstimate> base = resolve_flags(o.estimate);
  if (!base.ok()) return report_error(err, base.status());
  out << describe(o.estimate, *base) << '\n';
  out << fmt::format("largest batch per GPU, {} of each GPU's memory kept free ({} estimates)\n\n",
                     margin, search->estimates());
  out << t.render(kWidth);
  return kExitOk;
}

nlohmann::json knob_json(const Knob& k) {
  return {{"name", k.name},
          {"kind", knob_kind_name(k.kind)},
          {"args", k.args},
          {"cost", k.cost},
          {"recompute_share", k.recompute}};
}

std::string what_if_text(const WhatIf& w, const Estimate& base, const BatchFit& base_fit,
                         int64_t batch) {
  std::string s = fmt::format(
      "\nEach knob alone: peak allocated and device used at batch {}, saved device memory, and "
      "the largest batch\nwith it (largest first). Cost: recompute as a share of the step's "
      "FLOPs, or what else changes.\n\n",
      batch);
  TextTable t({{"knob", Align::kLeft, false},
               {"allocated", Align::kRight, false},
               {"device used", Align::kRight, false},
               {"saves", Align::kRight, false},
               {"max batch", Align::kRight, false},
               {"cost", Align::kLeft, false},
               {"change", Align::kLeft, true}});
  t.add_row({"(as given)", format_bytes(base.peak_allocated_bytes),
             format_bytes(base.device_used_bytes), "-", max_batch_text(base_fit), "-", "-"});
  for (const WhatIfRow& row : w.rows) {
    const int64_t saved = base.device_used_bytes - row.estimate.device_used_bytes;
    t.add_row({row.knob.name, format_bytes(row.estimate.peak_allocated_bytes),
               format_bytes(row.estimate.device_used_bytes),
               saved >= 0 ? format_bytes(saved) : "-" + format_bytes(-saved),
               max_batch_text(row.fit), row.knob.cost, join_words(row.knob.args)});
  }
  s += t.render(kWidth);
  for (const auto& [name, why] : w.skipped) s += fmt::format("not applicable: {}: {}\n", name, why);
  return s;
}

std::string target_text(const TargetPlan& p, const Estimate& as_given_at_target) {
  std::string s = fmt::format("\nBatch {}: ", p.target);
  if (p.fits && p.knobs.empty()) {
    return s + fmt::format("fits as given ({} device used).\n",
                           format_bytes(p.estimate.device_used_bytes));
  }
  s += fmt::format("does not fit as given (needs {}).\n",
                   format_bytes(as_given_at_target.device_used_bytes));
  if (p.fits) {
    std::vector<std::string> names;
    double recompute = 0;
    for (const Knob& k : p.knobs) {
      names.push_back(k.name);
      recompute += k.recompute;
    }
    s += fmt::format("  cheapest combination ({} estimates): {}\n", p.combinations_tried,
                     fmt::join(names, " + "));
    s += fmt::format("  device used {}; recompute {:.1f}% of step FLOPs\n",
                     format_bytes(p.estimate.device_used_bytes), 100 * recompute);
    s += fmt::format("  {}\n", command_line(p.flags));
    return s;
  }
  s += fmt::format("  no combination of the allowed knobs fits it ({} estimates).\n",
                   p.combinations_tried);
  if (p.micro_batch == 0) return s + "  not even batch 1 fits with gradient accumulation.\n";
  s += fmt::format(
      "  gradient accumulation: micro-batch {} x {} steps = effective batch {}, device used {}\n",
      p.micro_batch, p.accumulation, p.effective_batch, format_bytes(p.estimate.device_used_bytes));
  s += fmt::format("  {}\n", command_line(p.flags));
  return s;
}

int run_fit(FitFlags o, std::ostream& out, std::ostream& err) {
  EstimateFlags& flags = o.estimate;
  if (flags.device.gpu.empty() && flags.device.gpu_memory.empty()) {
    return report_error(err, invalid_argument("fit needs a GPU",
                                              "add --gpu NAME (see `trainfit gpus`) or --gpu all"));
  }
  if (flags.source.device_profile != "cuda") {
    return report_error(err, unsupported("fit plans for CUDA GPUs", "drop --device-profile cpu"));
  }
  const std::string margin = flags.device.margin.empty()
                                 ? fmt::format("{:g}%", 100 * kDefaultMargin)
                                 : flags.device.margin;
  if (Result<double> m = parse_margin(margin); !m.ok()) return report_error(err, m.status());
  if (flags.device.gpu == "all") {
    if (o.what_if || o.target_batch > 0) {
      return report_error(err, invalid_argument("--what-if and --target-batch plan for one GPU",
                                                "give --gpu NAME, e.g. --gpu rtx4090"));
    }
    flags.device.gpu.clear();
    return run_all(o, margin, out, err);
  }
  flags.device.margin = margin;
  Result<ResolvedEstimate> resolved = resolve_flags(flags);
  if (!resolved.ok()) return report_error(err, resolved.status());
  const DeviceProfile& device = resolved->options.device;
  Result<BatchSearch> search = BatchSearch::create(flags);
  if (!search.ok()) return report_error(err, search.status());
  Result<BatchFit> fit = search->fit(device);
  if (!fit.ok()) return report_error(err, fit.status());
  int estimates = search->estimates();

  // The batch the what-if rows are estimated at: the user's, else the largest that fits.
  if (!o.batch_given) flags.source.batch = std::max<int64_t>(1, fit->max_batch);
  nlohmann::json j{{"model", resolved->request.name},
                   {"gpu", device.gpu},
                   {"total_bytes", device.total_bytes},
                   {"margin_bytes", device.margin_bytes}};
  j.update(fit_json(*fit));
  std::string text = describe(flags, *resolved) + '\n' + budget_line(device) + "\n\n";
  if (fit->max_batch == 0) {
    text += fmt::format("  batch 1 does not fit: it needs {}\n",
                        format_bytes(fit->next_device_used_bytes));
  } else {
    text += fmt::format("  {:<18}{}   device used {} (peak allocated {}, reserved {})\n",
                        "largest batch", max_batch_text(*fit), format_bytes(fit->device_used_bytes),
                        format_bytes(fit->peak_allocated_bytes),
                        format_bytes(fit->peak_reserved_bytes));
    if (fit->alloc_retries > 0) {
      text += fmt::format(
          "  {:<18}fits only by freeing the allocator's cache mid-step ({} "
          "retries): slower\n",
          "note", fit->alloc_retries);
    }
    if (!fit->at_search_limit) {
      text += fmt::format("  {:<18}needs {}\n", fmt::format("batch {}", fit->max_batch + 1),
                          format_bytes(fit->next_device_used_bytes));
    }
  }
  std::vector<Knob> knobs;
  if (o.what_if || o.target_batch > 0) {
    Result<std::vector<Knob>> k = memory_knobs(flags, device);
    if (!k.ok()) return report_error(err, k.status());
    knobs = *std::move(k);
  }
  if (o.what_if) {
    Result<EstimateRun> base = run_pipeline(flags, {});
    if (!base.ok()) return report_error(err, base.status());
    Result<WhatIf> w = what_if(flags, knobs);
    if (!w.ok()) return report_error(err, w.status());
    estimates += 1 + w->estimates;
    text += what_if_text(*w, base->estimate, *fit, flags.source.batch);
    nlohmann::json rows = nlohmann::json::array();
    for (const WhatIfRow& row : w->rows) {
      nlohmann::json r = knob_json(row.knob);
      r["peak_allocated_bytes"] = row.estimate.peak_allocated_bytes;
      r["peak_reserved_bytes"] = row.estimate.peak_reserved_bytes;
      r["device_used_bytes"] = row.estimate.device_used_bytes;
      r["fits"] = row.estimate.fits;
      r["fit"] = fit_json(row.fit);
      r["estimate_args"] = estimate_args(row.flags);
      rows.push_back(r);
    }
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& [name, why] : w->skipped) skipped.push_back({{"name", name}, {"why", why}});
    j["what_if"] = {{"batch", flags.source.batch},
                    {"device_used_bytes", base->estimate.device_used_bytes},
                    {"rows", rows},
                    {"skipped", skipped}};
  }
  if (o.target_batch != 0) {
    Result<TargetPlan> plan = plan_target(flags, knobs, o.target_batch, o.allow_model_changes);
    if (!plan.ok()) return report_error(err, plan.status());
    estimates += plan->combinations_tried;
    EstimateFlags at = flags;
    at.source.batch = o.target_batch;
    Result<EstimateRun> given = run_pipeline(at, {});
    if (!given.ok()) return report_error(err, given.status());
    text += target_text(*plan, given->estimate);
    nlohmann::json t{{"batch", plan->target},
                     {"fits", plan->fits},
                     {"device_used_bytes", plan->estimate.device_used_bytes},
                     {"estimate_args", estimate_args(plan->flags)}};
    nlohmann::json names = nlohmann::json::array();
    for (const Knob& k : plan->knobs) names.push_back(knob_json(k));
    t["knobs"] = names;
    if (!plan->fits) {
      t["accumulation"] = {{"micro_batch", plan->micro_batch},
                           {"steps", plan->accumulation},
                           {"effective_batch", plan->effective_batch}};
    }
    j["target"] = t;
  }
  j["estimates"] = estimates;
  if (o.json) {
    out << j.dump(2) << '\n';
  } else {
    out << text;
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_fit(CLI::App& app) {
  auto o = std::make_shared<FitFlags>();
  app.footer(
      "Searches the batch over the whole estimate pipeline (allocator rounding and caching are\n"
      "not linear in the batch): the batch it prints fits, one more does not. A batch fits when\n"
      "device used (reserved + CUDA context) stays within the GPU's memory less the margin.\n\n"
      "--what-if turns on one memory knob at a time: AMP, a fused or 8-bit optimizer, SGD with\n"
      "momentum, expandable segments, activation checkpointing per block family, a frozen\n"
      "backbone, and smaller model settings; each row is `trainfit estimate` with its change.\n"
      "--target-batch tries knobs from the least intrusive (allocator, fused optimizer) through\n"
      "precision (AMP, 8-bit state), checkpointing (least recompute first) and recipe changes\n"
      "(SGD, frozen backbone) to, with --allow-model-changes, smaller models; when none fits it\n"
      "plans gradient accumulation.\n\n"
      "Examples:\n"
      "  trainfit fit --model resnet50 --gpu rtx4090\n"
      "  trainfit fit --model act --set cameras=640x360,640x480,640x480 --gpu all\n"
      "  trainfit fit --model act --set chunk_size=100 --batch 48 --gpu rtx4090 --what-if\n"
      "  trainfit fit --model vit_b_16 --gpu a100-80gb --target-batch 512 --json");
  add_estimate_flags(app, o->estimate);
  app.get_option("--gpu")->description(
      "GPU from the catalog (see `trainfit gpus`), or all: one row per catalog GPU");
  app.add_flag("--what-if", o->what_if,
               "rank the memory knobs that apply: device use at --batch (default: the largest "
               "batch), largest batch, cost");
  app.add_option("--target-batch", o->target_batch,
                 "the cheapest knobs that make this batch fit, or a gradient-accumulation plan");
  app.add_flag("--allow-model-changes", o->allow_model_changes,
               "let --target-batch change the model (chunk_size, layers, image size, ...)");
  app.add_flag("--json", o->json, "print one JSON object");
  return [o, &app](std::ostream& out, std::ostream& err) {
    FitFlags flags = *o;
    flags.batch_given = app.get_option("--batch")->count() > 0;
    return run_fit(flags, out, err);
  };
}

}  // namespace trainfit
