// trainfit compare: several models side by side. Each model source starts at its --model (or
// --trace) and takes its own options; options before the first one apply to every model.
//
//   trainfit compare --gpu rtx4090 --model act --batch 48 --model diffusion --batch 64
//   trainfit compare --gpu rtx4090 --trace mine.trace.json --batch 32 --model resnet50 --batch 32
#include <fmt/format.h>

#include <algorithm>

#include "cli/cli.h"
#include "cli/input_files.h"
#include "cli/request_cli.h"
#include "report/html.h"
#include "report/json.h"
#include "report/text.h"

namespace trainfit {
namespace {

std::string options_help() {
  CLI::App app{"", "compare"};
  RequestCli flags(RequestCommand::kCompare);
  flags.add_to(app, /*layered=*/true);
  std::string help = app.help();
  // Keep the option list only: drop the usage and --help lines the throwaway parser prints.
  const size_t model = help.find("  --model");
  if (model == std::string::npos) return help;
  return "Options of each model source:\n" + help.substr(model);
}

// One model source's arguments (the shared ones first) as a request.
Result<TrainingRequest> segment_request(const std::vector<std::string>& args, size_t index) {
  RequestCli flags(RequestCommand::kCompare);
  if (Status parsed = flags.parse_layered(args); !parsed.ok()) {
    return invalid_argument(fmt::format("model {}: {}", index + 1, parsed.message()),
                            "see trainfit compare --help");
  }
  Result<TrainingRequest> request = flags.to_request();
  if (!request.ok()) {
    const std::string source = flags.given("model")       ? flags.text("model")
                               : flags.given("hf_config") ? flags.text("hf_config")
                                                          : flags.text("trace");
    return request.status().with_context(fmt::format("model {} ({})", index + 1, source));
  }
  return request;
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
  std::string html;
  for (auto it = args.begin(); it != args.end();) {
    if (*it == "--html" || it->starts_with("--html=")) {
      const bool joined = it->starts_with("--html=");
      if (!joined && it + 1 == args.end()) {
        return report_error(err,
                            invalid_argument("--html needs a file name", "--html compare.html"));
      }
      html = joined ? it->substr(7) : *(it + 1);
      it = args.erase(it, it + (joined ? 1 : 2));
    } else {
      ++it;
    }
  }
  // Split at each --model, --hf-config or --trace; what comes before the first applies to all.
  std::vector<std::string> shared;
  std::vector<std::vector<std::string>> models;
  for (const std::string& a : args) {
    if (a == "--model" || a.starts_with("--model=") || a == "--trace" ||
        a.starts_with("--trace=") || a == "--hf-config" || a.starts_with("--hf-config=")) {
      models.emplace_back();
    }
    (models.empty() ? shared : models.back()).push_back(a);
  }
  if (Status enough = check_model_count(models.size()); !enough.ok()) {
    return report_error(err, enough);
  }
  std::vector<TrainingRequest> requests;
  for (size_t i = 0; i < models.size(); ++i) {
    std::vector<std::string> segment = shared;
    segment.insert(segment.end(), models[i].begin(), models[i].end());
    Result<TrainingRequest> request = segment_request(segment, i);
    if (!request.ok()) return report_error(err, request.status());
    requests.push_back(std::move(*request));
  }
  Result<std::vector<CompareEntry>> entries = make_compare_report(requests);
  if (!entries.ok()) return report_error(err, entries.status());
  if (!html.empty()) {
    Status st = write_report_file("--html", html, compare_html(*entries));
    if (!st.ok()) return report_error(err, st);
  }
  if (json) {
    out << compare_json(*entries).dump(2) << '\n';
  } else {
    out << compare_text(*entries);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_compare(CLI::App& app) {
  app.prefix_command();
  app.allow_extras();
  app.footer(
      "Usage: trainfit compare [SHARED OPTIONS] --model A [OPTIONS] --model B [OPTIONS] ... "
      "[--json] [--html FILE]\n\n"
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
      "  trainfit compare --gpu rtx4090 --model act --batch 48 --model diffusion --batch 64 "
      "--html act-vs-diffusion.html\n"
      "  trainfit compare --gpu rtx4090 --trace mine.trace.json --batch 32 --model resnet50 "
      "--batch 32");
  return [&app](std::ostream& out, std::ostream& err) { return run_compare(app, out, err); };
}

}  // namespace trainfit
