#include "report/format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

namespace trainfit {

std::vector<ModuleBytes> largest_first(std::vector<ModuleBytes> rows, double share,
                                       size_t max_rows) {
  int64_t total = 0;
  for (const ModuleBytes& r : rows) total += r.bytes;
  std::stable_sort(rows.begin(), rows.end(),
                   [](const ModuleBytes& a, const ModuleBytes& b) { return a.bytes > b.bytes; });
  const auto large = [&](const ModuleBytes& r) {
    return static_cast<double>(r.bytes) >= share * static_cast<double>(total);
  };
  size_t keep = 0;
  while (keep < rows.size() && keep < max_rows && large(rows[keep])) ++keep;
  if (rows.size() - keep == 1 && keep < max_rows) ++keep;  // a lone leftover shows as itself
  if (keep < rows.size()) {
    if (keep == max_rows) --keep;  // make room for the "other" line
    ModuleBytes rest{fmt::format("other ({} blocks)", rows.size() - keep), 0};
    for (size_t i = keep; i < rows.size(); ++i) rest.bytes += rows[i].bytes;
    rows.resize(keep);
    rows.push_back(std::move(rest));
  }
  return rows;
}

std::string_view profile_name(const KernelTarget& target) {
  return kDeviceNames.name(target.device);
}

std::string profile_description(const KernelTarget& target) {
  if (target.device == Device::kCpu) return "cpu (PyTorch 1.13 CPU kernels)";
  return "cuda (PyTorch 2.x CUDA kernels)";
}

namespace {

// A shell-safe argument: quoted when it holds a glob or other special character.
std::string shell_word(const std::string& arg) {
  const bool plain = std::all_of(arg.begin(), arg.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-_.=,%/:+").find(c) != std::string_view::npos;
  });
  return plain && !arg.empty() ? arg : fmt::format("'{}'", arg);
}

}  // namespace

std::string join_words(const std::vector<std::string>& args) {
  std::vector<std::string> words;
  words.reserve(args.size());
  for (const std::string& a : args) words.push_back(shell_word(a));
  return fmt::format("{}", fmt::join(words, " "));
}

std::string command_line(const std::vector<std::string>& estimate_args) {
  return "trainfit estimate " + join_words(estimate_args);
}

std::string unplanned_accumulation(const TargetPlan& plan) {
  return fmt::format(
      "gradient accumulation would take {} micro-batches of {}, more than the {} a plan goes "
      "to: more GPUs (trainfit launch) or a smaller target.",
      plan.accumulation, plan.micro_batch, kMaxPlannedAccumulation);
}

std::string workspace_bound_reason(const Estimate& e) {
  const int64_t unmeasured = e.unmeasured_workspace_calls();
  if (unmeasured == 0) return "";
  const int64_t all = unmeasured + e.workspace_calls[static_cast<size_t>(FigureSource::kMeasured)];
  return fmt::format("{} of {} cuDNN workspaces not measured on this GPU", unmeasured, all);
}

std::vector<WorkspaceSourceRow> workspace_source_rows(const Estimate& e) {
  std::vector<WorkspaceSourceRow> rows;
  for (const FigureSource s :
       {FigureSource::kMeasured, FigureSource::kScaled, FigureSource::kRule}) {
    const auto i = static_cast<size_t>(s);
    rows.push_back(
        {kFigureSourceNames.name(s), e.workspace_calls[i], e.workspace_bytes_at_peak[i]});
  }
  return rows;
}

}  // namespace trainfit
