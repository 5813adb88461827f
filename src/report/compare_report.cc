#include "report/compare_report.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainfit {
namespace {

BlockFigures per_sample_figures(const BlockFigures& one, BlockFigures two) {
  for (BlockRow& row : two.blocks) {
    const auto same = std::find_if(one.blocks.begin(), one.blocks.end(),
                                   [&](const BlockRow& r) { return r.block == row.block; });
    if (same != one.blocks.end()) row.kept_bytes -= same->kept_bytes;
  }
  two.kept_bytes -= one.kept_bytes;
  two.attention_bytes -= one.attention_bytes;
  return two;
}

Result<CompareEntry> compare_entry(const TrainingRequest& request) {
  PipelineEstimator estimator;
  TF_ASSIGN_OR_RETURN(EstimateRun run, estimator.run(request));
  CompareEntry entry;
  if (run.resolved.trace) {
    // The trace's own per-sample growth, under the same device and optimizer as the estimate.
    TF_ASSIGN_OR_RETURN(entry.per_sample,
                        per_sample_blocks(*run.resolved.trace, run.resolved.options));
  } else {
    // Per sample: what one more sample adds (batch 2 minus batch 1), so that what does not grow
    // with the batch (autocast's low-precision weight copies) is not counted as a sample's.
    ModelRequest one = run.resolved.model;
    one.batch = 1;
    TF_ASSIGN_OR_RETURN(Graph graph_one, build_model(one));
    ModelRequest two = run.resolved.model;
    two.batch = 2;
    TF_ASSIGN_OR_RETURN(Graph graph_two, build_model(two));
    entry.per_sample = per_sample_figures(block_figures(graph_one), block_figures(graph_two));
    entry.facts = graph_one.facts;
    entry.sets = request.sets;
  }
  entry.header = header_of(run.resolved);
  entry.estimate = std::move(run.estimate);
  return entry;
}

}  // namespace

Status check_model_count(size_t models) {
  if (models >= 2) return {};
  return invalid_argument(fmt::format("compare needs two or more models, got {}", models),
                          "give each its own --model (or --trace), e.g. trainfit compare "
                          "--model act --batch 48 --model diffusion --batch 64");
}

Result<std::vector<CompareEntry>> make_compare_report(
    const std::vector<TrainingRequest>& requests) {
  TF_RETURN_IF_ERROR(check_model_count(requests.size()));
  std::vector<CompareEntry> entries;
  for (size_t i = 0; i < requests.size(); ++i) {
    const TrainingRequest& r = requests[i];
    Result<CompareEntry> entry = compare_entry(r);
    if (!entry.ok()) {
      return entry.status().with_context(
          fmt::format("model {} ({})", i + 1, r.model.empty() ? r.trace_source : r.model));
    }
    entries.push_back(std::move(*entry));
  }
  const Device device = entries.front().header.device.target.device;
  for (const CompareEntry& e : entries) {
    if (e.header.device.target.device != device) {
      return invalid_argument("compare needs every model on one device profile",
                              "put --device-profile before the first --model");
    }
  }
  return entries;
}

Dominant dominant_category(const Estimate& e) {
  Dominant d;
  for (int c = 0; c < kCategoryCount; ++c) {
    const int64_t bytes = e.breakdown[static_cast<size_t>(c)];
    if (bytes > d.bytes) {
      d.category = static_cast<Category>(c);
      d.bytes = bytes;
    }
  }
  if (e.peak_allocated_bytes > 0) {
    d.share = static_cast<double>(d.bytes) / static_cast<double>(e.peak_allocated_bytes);
  }
  return d;
}

}  // namespace trainfit
