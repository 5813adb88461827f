// trainfit fit: the largest batch that fits a GPU (or every catalog GPU), what each memory knob
// saves and costs (--what-if), and the cheapest way to fit a target batch (--target-batch).
#include <memory>

#include "cli/cli.h"
#include "cli/input_files.h"
#include "cli/request_cli.h"
#include "report/html.h"
#include "report/json.h"
#include "report/text.h"

namespace trainfit {
namespace {

struct FitFlags {
  RequestCli request{RequestCommand::kFit};
  bool what_if = false;
  int64_t target_batch = 0;
  bool allow_model_changes = false;
  std::string rank = "memory";
  bool curve = false;
  std::string html;
  bool json = false;
};

// The flags checked in the order the planner would meet them, so that the first problem is
// the one reported; then the request.
Result<FitRequest> to_fit_request(const FitFlags& o, bool batch_given) {
  const RequestCli& flags = o.request;
  if (!flags.given("gpu") && !flags.given("gpu_memory")) {
    return invalid_argument("fit needs a GPU", "add --gpu NAME (see `trainfit gpus`) or --gpu all");
  }
  if (flags.given("device_profile") && flags.text("device_profile") != "cuda") {
    return unsupported("fit plans for CUDA GPUs", "drop --device-profile cpu");
  }
  FitRequest f;
  f.all_gpus = flags.text("gpu") == "all";
  f.batch_given = batch_given;
  f.what_if = o.what_if;
  f.target_batch = o.target_batch;
  f.allow_model_changes = o.allow_model_changes;
  f.curve = o.curve || !o.html.empty();
  TF_ASSIGN_OR_RETURN(f.rank, parse_enum(kRankNames, "--rank", o.rank));
  TF_ASSIGN_OR_RETURN(f.request, flags.to_request(f.all_gpus ? "gpu" : ""));
  return f;
}

int run_fit(const FitFlags& o, bool batch_given, std::ostream& out, std::ostream& err) {
  Result<FitRequest> request = to_fit_request(o, batch_given);
  if (!request.ok()) return report_error(err, request.status());
  Result<FitReport> report = make_fit_report(*request);
  if (!report.ok()) return report_error(err, report.status());
  if (!o.html.empty()) {
    Status st = write_report_file("--html", o.html, fit_html(*report));
    if (!st.ok()) return report_error(err, st);
  }
  if (o.json) {
    out << fit_json(*report).dump(2) << '\n';
  } else {
    out << fit_text(*report);
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
      "plans gradient accumulation. Each plan shows the predicted step time and its change;\n"
      "--rank time puts the fastest first: what-if rows by step time, the target batch's\n"
      "knobs by their step time, and --gpu all's cards by samples/s.\n\n"
      "Examples:\n"
      "  trainfit fit --model resnet50 --gpu rtx4090\n"
      "  trainfit fit --model act --set cameras=640x360,640x480,640x480 --gpu all\n"
      "  trainfit fit --model act --set chunk_size=100 --batch 48 --gpu rtx4090 --what-if\n"
      "  trainfit fit --model resnet50 --gpu all --rank time\n"
      "  trainfit fit --model vit_b_16 --gpu a100-80gb --target-batch 512 --json\n"
      "  trainfit fit --model resnet50 --gpu rtx4090 --what-if --html fit.html");
  o->request.add_to(app);
  app.get_option("--gpu")->description(
      "GPU from the catalog (see `trainfit gpus`), or all: one row per catalog GPU");
  app.add_flag("--what-if", o->what_if,
               "rank the memory knobs that apply: device use at --batch (default: the largest "
               "batch), largest batch, cost");
  app.add_option("--target-batch", o->target_batch,
                 "the cheapest knobs that make this batch fit, or a gradient-accumulation plan");
  app.add_flag("--allow-model-changes", o->allow_model_changes,
               "let --target-batch change the model (chunk_size, layers, image size, ...)");
  app.add_option("--rank", o->rank,
                 "memory (default: largest batch first) or time (fastest step first)");
  app.add_flag("--curve", o->curve,
               "also show memory against batch size, from batch 1 to past the largest");
  app.add_flag("--json", o->json, "print one JSON object");
  app.add_option("--html", o->html,
                 "also write a self-contained HTML report: memory against batch per GPU with "
                 "its budget, the knobs as bars, the target plan (implies --curve)");
  return [o, &app](std::ostream& out, std::ostream& err) {
    return run_fit(*o, app.get_option("--batch")->count() > 0, out, err);
  };
}

}  // namespace trainfit
