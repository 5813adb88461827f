#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "base/units.h"
#include "report/format.h"
#include "report/table.h"
#include "report/text.h"

namespace trainfit {
namespace {

constexpr size_t kWidth = 120;
constexpr size_t kMaxBlockRows = 6;

std::string percent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return fmt::format("{:.0f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// A block under the root without the root's prefix ("encoder" for "model.encoder"); the root's
// own row holds what its forward does outside its children (stacking tokens, the loss).
std::string block_label(const BlockFigures& f, const BlockRow& b) {
  if (b.block == f.root) return fmt::format("({} itself)", f.root);
  if (!f.root.empty() && b.block.starts_with(f.root + "."))
    return b.block.substr(f.root.size() + 1);
  return b.block;
}

// Parameter counts in a cell: "17.3M".
std::string short_count(int64_t n) {
  if (n >= 1'000'000) return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
  if (n >= 1'000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

// The largest blocks by `value`, small ones folded into "other", as "name  value (share)".
std::vector<std::string> block_cells(const BlockFigures& f,
                                     const std::function<int64_t(const BlockRow&)>& value,
                                     const std::function<std::string(int64_t)>& show) {
  std::vector<ModuleBytes> rows;
  int64_t total = 0;
  for (const BlockRow& b : f.blocks) {
    if (value(b) > 0) rows.push_back({block_label(f, b), value(b)});
    total += value(b);
  }
  rows = largest_first(std::move(rows), 0.01, kMaxBlockRows);
  std::vector<std::string> cells;
  cells.reserve(rows.size());
  for (const ModuleBytes& r : rows) {
    cells.push_back(fmt::format("{} {} ({})", r.module, show(r.bytes), percent(r.bytes, total)));
  }
  return cells;
}

std::vector<std::string> sets_cells(const CompareEntry& e) {
  if (e.sets.empty()) return {"defaults"};
  std::vector<std::string> cells;
  for (const auto& [k, v] : e.sets) cells.push_back(fmt::format("{}={}", k, v));
  return cells;
}

std::string fits_text(const Estimate& e) {
  if (e.oom) return fmt::format("no: out of memory ({})", phase_name(e.oom->phase));
  if (e.fits) return fmt::format("yes, {} headroom", format_bytes(e.headroom_bytes));
  return fmt::format("no, {} over", format_bytes(-e.headroom_bytes));
}

}  // namespace

std::string compare_text(const std::vector<CompareEntry>& entries) {
  std::vector<Column> columns = {{"", Align::kLeft, false}};
  for (const CompareEntry& e : entries) {
    columns.push_back({model_title(e.header), Align::kLeft, true});
  }
  TextTable table(std::move(columns));
  auto add = [&](const std::string& label,
                 const std::function<std::string(const CompareEntry&)>& cell) {
    std::vector<std::string> row{label};
    for (const CompareEntry& e : entries) row.push_back(cell(e));
    table.add_row(std::move(row));
  };
  // Rows of per-model lists (blocks, facts), aligned by rank.
  auto add_list = [&](const std::string& label,
                      const std::function<std::vector<std::string>(const CompareEntry&)>& cells) {
    std::vector<std::vector<std::string>> lists;
    size_t n = 0;
    for (const CompareEntry& e : entries) {
      lists.push_back(cells(e));
      n = std::max(n, lists.back().size());
    }
    for (size_t i = 0; i < n; ++i) {
      std::vector<std::string> row{i == 0 ? label : ""};
      for (const auto& l : lists) row.push_back(i < l.size() ? l[i] : "");
      table.add_row(std::move(row));
    }
  };
  const bool any_gpu = std::any_of(entries.begin(), entries.end(), [](const CompareEntry& e) {
    return e.estimate.total_bytes >= 0;
  });
  add("batch", [](const CompareEntry& e) { return std::to_string(e.header.batch); });
  add_list("settings", sets_cells);
  add("precision",
      [](const CompareEntry& e) { return std::string(precision_name(e.header.precision)); });
  add("optimizer", [](const CompareEntry& e) {
    return optimizer_line(e.header) + (e.header.optimizer.preset.empty() ? "" : ", preset");
  });
  add_list("facts", [](const CompareEntry& e) {
    std::vector<std::string> cells;
    for (const GraphFact& f : e.facts)
      cells.push_back(fmt::format("{} {}", f.key, format_count(f.value)));
    return cells;
  });
  add("parameters", [](const CompareEntry& e) { return format_count(e.estimate.parameters); });
  add_list("  by block", [](const CompareEntry& e) {
    return block_cells(
        e.per_sample, [](const BlockRow& b) { return b.parameters; },
        [](int64_t n) { return short_count(n); });
  });
  add("kept per sample",
      [](const CompareEntry& e) { return format_bytes(e.per_sample.kept_bytes); });
  add_list("  by block", [](const CompareEntry& e) {
    return block_cells(
        e.per_sample, [](const BlockRow& b) { return b.kept_bytes; },
        [](int64_t n) { return format_bytes(n); });
  });
  add("  attention matrices", [](const CompareEntry& e) {
    if (!e.per_sample.attention_known) return std::string("not told apart in a trace");
    if (e.per_sample.attention_bytes == 0) return std::string("none");
    return fmt::format("{} ({} of the sample)", format_bytes(e.per_sample.attention_bytes),
                       percent(e.per_sample.attention_bytes, e.per_sample.kept_bytes));
  });
  add("kept at batch",
      [](const CompareEntry& e) { return format_bytes(e.estimate.activation_bytes); });
  add("peak allocated",
      [](const CompareEntry& e) { return format_bytes(e.estimate.peak_allocated_bytes); });
  add("peak reserved",
      [](const CompareEntry& e) { return format_bytes(e.estimate.peak_reserved_bytes); });
  if (entries.front().header.device.target.device == Device::kCuda) {
    add("device used",
        [](const CompareEntry& e) { return format_bytes(e.estimate.device_used_bytes); });
    // Note [Workspace bounds]
    if (std::any_of(entries.begin(), entries.end(), [](const CompareEntry& e) {
          return e.estimate.unmeasured_workspace_calls() > 0;
        })) {
      add("  up to", [](const CompareEntry& e) {
        const int64_t unmeasured = e.estimate.unmeasured_workspace_calls();
        if (unmeasured == 0) return std::string("(none unmeasured)");
        const int64_t all =
            unmeasured + e.estimate.workspace_calls[static_cast<size_t>(FigureSource::kMeasured)];
        return fmt::format("{} ({} of {} workspaces unmeasured)",
                           format_bytes(e.estimate.device_used_upper_bytes), unmeasured, all);
      });
    }
  }
  add("peak in", [](const CompareEntry& e) {
    return fmt::format("{}, iteration {}", phase_name(e.estimate.peak.phase),
                       e.estimate.peak.iteration + 1);
  });
  add("  at", [](const CompareEntry& e) {
    const Moment& m = e.estimate.peak;
    if (m.op.empty()) return std::string("optimizer.step()");
    return fmt::format("{} ({})", m.module.empty() ? "-" : m.module, m.op);
  });
  add("dominated by", [](const CompareEntry& e) {
    const Dominant d = dominant_category(e.estimate);
    return fmt::format("{} {} ({:.0f}%)", category_name(d.category), format_bytes(d.bytes),
                       100 * d.share);
  });
  if (any_gpu) {
    add("fits", [](const CompareEntry& e) {
      if (e.estimate.total_bytes < 0) return std::string("-");
      return fmt::format("{}: {}", e.header.device.gpu, fits_text(e.estimate));
    });
  }
  const bool any_time = std::any_of(entries.begin(), entries.end(),
                                    [](const CompareEntry& e) { return e.estimate.time; });
  if (any_time) {
    add("step time", [](const CompareEntry& e) {
      const std::optional<StepTime>& t = e.estimate.time;
      if (!t) return std::string("-");
      return fmt::format("{} ({:.0f} samples/s)", format_duration(t->step_s), t->samples_per_s);
    });
    add_list("  by part", [](const CompareEntry& e) {
      std::vector<std::string> cells;
      const std::optional<StepTime>& t = e.estimate.time;
      if (!t) return cells;
      for (size_t p = 0; p < kStepPartCount; ++p) {
        const auto part = static_cast<StepPart>(p);
        if (part == StepPart::kRecompute && t->part_s[p] == 0) continue;
        cells.push_back(fmt::format("{} {} ({})", kStepPartNames.name(part),
                                    format_duration(t->part_s[p]),
                                    t->cpu_s[p] > t->gpu_s[p] ? "host-bound" : "GPU"));
      }
      return cells;
    });
  }
  const DeviceProfile& d = entries.front().header.device;
  return fmt::format("trainfit compare, profile {}\n\n", profile_description(d.target)) +
         table.render(kWidth) +
         "\nkept per sample: the bytes autograd keeps for backward that one more sample adds "
         "(batch 2 minus batch 1),\nby block; the other figures are at each model's batch" +
         std::string(any_time ? ", the step time predicted on its GPU" : "") + ".\n";
}

}  // namespace trainfit
