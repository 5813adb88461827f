// trainfit compare: several models side by side. Each model source starts at its --model (or
// --trace) and takes its own options; options before the first one apply to every model.
//
//   trainfit compare --gpu rtx4090 --model act --batch 48 --model diffusion --batch 64
//   trainfit compare --gpu rtx4090 --trace mine.trace.json --batch 32 --model resnet50 --batch 32
#include <fmt/format.h>

#include <algorithm>

#include "cli/cli.h"
#include "cli/pipeline.h"
#include "report/compare_report.h"

namespace trainfit {
namespace {

std::string options_help() {
  CLI::App app{"", "compare"};
  EstimateFlags f;
  add_layered_flags(app, f);
  std::string help = app.help();
  // Keep the option list only: drop the usage and --help lines the throwaway parser prints.
  const size_t model = help.find("  --model");
  if (model == std::string::npos) return help;
  return "Options of each model source:\n" + help.substr(model);
}

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

Result<CompareEntry> run_segment(const std::vector<std::string>& args, size_t index) {
  Result<EstimateFlags> parsed = parse_layered_flags(args);
  if (!parsed.ok()) {
    return invalid_argument(fmt::format("model {}: {}", index + 1, parsed.status().message()),
                            "see trainfit compare --help");
  }
  const EstimateFlags& f = *parsed;
  const std::string& source = f.source.model.empty() ? f.source.trace : f.source.model;
  const auto in_context = [&](const Status& status) {
    return status.with_context(fmt::format("model {} ({})", index + 1, source));
  };
  Result<EstimateRun> run = run_pipeline(f, {});
  if (!run.ok()) return in_context(run.status());
  CompareEntry entry;
  if (run->trace) {
    // The trace's own per-sample growth, under the same device and optimizer as the estimate.
    Result<ResolvedEstimate> resolved = resolve_flags(f);
    if (!resolved.ok()) return in_context(resolved.status());
    Result<BlockFigures> per_sample = per_sample_blocks(*run->trace, resolved->options);
    if (!per_sample.ok()) return in_context(per_sample.status());
    entry.per_sample = std::move(*per_sample);
  } else {
    // Per sample: what one more sample adds (batch 2 minus batch 1), so that what does not grow
    // with the batch (autocast's low-precision weight copies) is not counted as a sample's.
    ModelRequest one = run->request;
    one.batch = 1;
    TF_ASSIGN_OR_RETURN(Graph graph_one, build_model(one));
    ModelRequest two = run->request;
    two.batch = 2;
    TF_ASSIGN_OR_RETURN(Graph graph_two, build_model(two));
    entry.per_sample = per_sample_figures(block_figures(graph_one), block_figures(graph_two));
    entry.facts = graph_one.facts;
    entry.sets = run->request.sets;
  }
  entry.header = run->header;
  entry.estimate = std::move(run->estimate);
  return entry;
}

int run_compare(const CLI::App& app, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args = app.remaining();
  if (std::find_if(args.begin(), args.end(),
                   [](const std::string& a) { return a == "--help" || a == "-h"; }) != args.end()) {
    out << app.help();
    return kExitOk;
  }
  const auto json_end = std::remove(args.begin(), args.end(), std::string("--json"));
  const bool json = json_end != args.end();
  args.erase(json_end, args.end());
  // Split at each --model or --trace; what comes before the first applies to all.
  std::vector<std::string> shared;
  std::vector<std::vector<std::string>> models;
  for (const std::string& a : args) {
    if (a == "--model" || a.starts_with("--model=") || a == "--trace" ||
        a.starts_with("--trace=")) {
      models.emplace_back();
    }
    (models.empty() ? shared : models.back()).push_back(a);
  }
  if (models.size() < 2) {
    return report_error(
        err,
        invalid_argument(fmt::format("compare needs two or more models, got {}", models.size()),
                         "give each its own --model (or --trace), e.g. trainfit compare "
                         "--model act --batch 48 --model diffusion --batch 64"));
  }
  std::vector<CompareEntry> entries;
  for (size_t i = 0; i < models.size(); ++i) {
    std::vector<std::string> segment = shared;
    segment.insert(segment.end(), models[i].begin(), models[i].end());
    Result<CompareEntry> entry = run_segment(segment, i);
    if (!entry.ok()) return report_error(err, entry.status());
    entries.push_back(std::move(*entry));
  }
  const Device device = entries.front().header.device.target.device;
  for (const CompareEntry& e : entries) {
    if (e.header.device.target.device != device) {
      return report_error(err, invalid_argument("compare needs every model on one device profile",
                                                "put --device-profile before the first --model"));
    }
  }
  if (json) {
    out << compare_json(entries).dump(2) << '\n';
  } else {
    out << compare_text(entries);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_compare(CLI::App& app) {
  app.prefix_command();
  app.allow_extras();
  app.footer(
      "Usage: trainfit compare [SHARED OPTIONS] --model A [OPTIONS] --model B [OPTIONS] ... "
      "[--json]\n\n"
      "Each --model (a zoo model) or --trace (your traced model) starts a model source with its\n"
      "own options (batch, --set keys, precision, optimizer); options before the first one\n"
      "apply to every model, and a model's own value wins. For each model: parameters and bytes "
      "kept for backward per sample, by block;\n"
      "the attention matrices among them; peak allocated and reserved at its batch, where the\n"
      "peak happens and what dominates it; and with --gpu, whether it fits.\n\n" +
      options_help() +
      "\nExamples:\n"
      "  trainfit compare --gpu rtx4090 --model act --batch 48 --model diffusion --batch 64\n"
      "  trainfit compare --model act --set use_vae=false --model act --set chunk_size=50\n"
      "  trainfit compare --precision amp-bf16 --model resnet50 --batch 64 --model vit_b_16 "
      "--batch 64 --json\n"
      "  trainfit compare --gpu rtx4090 --trace mine.trace.json --batch 32 --model resnet50 "
      "--batch 32");
  return [&app](std::ostream& out, std::ostream& err) { return run_compare(app, out, err); };
}

}  // namespace trainfit
