// Shared pieces of the text reports: folding long lists, naming the device profile, and
// quoting command lines (units.h formats the numbers).
//
//   largest_first(rows, 0.01, 6)   // the largest rows, the small ones as "other (N blocks)"
//   profile_description(target)    // "cuda (PyTorch 2.x CUDA kernels)"
//   command_line({"--checkpoint", "layer3.*"}) == "trainfit estimate --checkpoint 'layer3.*'"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "estimate/estimate.h"
#include "plan/target.h"

namespace trainfit {

// Largest first, at most `max_rows` lines: the rows under `share` of their total (and those
// past the limit) fold into one "other (N blocks)" row, so a report shows what matters at a
// glance.
std::vector<ModuleBytes> largest_first(std::vector<ModuleBytes> rows, double share = 0.01,
                                       size_t max_rows = SIZE_MAX);

// "cuda (PyTorch 2.x CUDA kernels)" / "cpu (PyTorch 1.13 CPU kernels)"
std::string profile_description(const KernelTarget& target);
std::string_view profile_name(const KernelTarget& target);  // "cuda" / "cpu"

// Arguments as one shell line, each quoted when it holds a glob or another special character.
std::string join_words(const std::vector<std::string>& args);
// `trainfit estimate` with these arguments.
std::string command_line(const std::vector<std::string>& estimate_args);

// What a target plan says when accumulation would take more micro-batches than a plan goes to
// (it is not estimated): "gradient accumulation would take 6250000 micro-batches of 160, ...".
std::string unplanned_accumulation(const TargetPlan& plan);

// Why an estimate has a bound above its central figure (Note [Workspace bounds]): "38 of 160
// cuDNN workspaces not measured on this GPU"; empty where every workspace was measured.
std::string workspace_bound_reason(const Estimate& e);
// The JSON object of where the estimate's workspaces come from: per FigureSource, the kernel
// calls of one step and the bytes alive at the allocated peak.
struct WorkspaceSourceRow {
  std::string_view source;
  int64_t calls = 0;
  int64_t bytes_at_peak = 0;
};
std::vector<WorkspaceSourceRow> workspace_source_rows(const Estimate& e);

}  // namespace trainfit
