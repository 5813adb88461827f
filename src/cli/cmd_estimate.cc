// trainfit estimate: peak GPU memory of two training iterations, with where it peaks and what
// it is made of.
#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "cli/cli.h"
#include "cli/input_files.h"
#include "cli/request_cli.h"
#include "report/csv.h"
#include "report/html.h"
#include "report/json.h"
#include "report/text.h"

namespace trainfit {
namespace {

struct EstimateFlags {
  RequestCli request{RequestCommand::kEstimate};
  std::string timeline;
  std::string html;
  bool json = false;
  bool explain = false;
};

int run_estimate(const EstimateFlags& o, std::ostream& out, std::ostream& err) {
  Result<TrainingRequest> request = o.request.to_request();
  if (!request.ok()) return report_error(err, request.status());
  const bool html = !o.html.empty();
  Result<EstimateReport> report = make_estimate_report(
      *request, {.timeline = !o.timeline.empty() || html, .explain = o.explain || html});
  if (!report.ok()) return report_error(err, report.status());
  if (!o.timeline.empty()) {
    Status st = write_report_file("--timeline", o.timeline, timeline_csv(*report));
    if (!st.ok()) return report_error(err, st);
  }
  if (html) {
    Status st = write_report_file("--html", o.html, estimate_html(*report));
    if (!st.ok()) return report_error(err, st);
  }
  if (o.json) {
    out << estimate_json(*report).dump(2) << '\n';
  } else {
    out << estimate_text(*report);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_estimate(CLI::App& app) {
  auto o = std::make_shared<EstimateFlags>();
  app.footer(
      "Simulates two training iterations (forward, loss, backward, optimizer.step,\n"
      "zero_grad(set_to_none=True)) and PyTorch's CUDA caching allocator. Peak allocated and\n"
      "reserved are what torch.cuda.max_memory_allocated()/max_memory_reserved() would report;\n"
      "device used adds the CUDA context, as nvidia-smi shows it.\n\n"
      "Examples:\n"
      "  trainfit estimate --model resnet50 --batch 64 --gpu rtx4090\n"
      "  trainfit estimate --model vit_b_16 --batch 128 --precision amp-bf16 --optimizer adamw "
      "--gpu a100-80gb\n"
      "  trainfit estimate --model resnet50 --batch 256 --checkpoint 'layer3.*' --json\n"
      "  trainfit estimate --model gpt2 --seq-len 1024 --batch 8 --timeline memory.csv\n"
      "  trainfit estimate --model resnet50 --batch 64 --gpu rtx4090 --html resnet50.html\n"
      "  trainfit estimate --model resnet50 --batch 64 --gpu rtx4090 --gpus 2   (DDP: one rank's "
      "memory)\n"
      "  trainfit estimate --model resnet50 --batch 32 --gpus 2 --baseline-batch 256 "
      "--baseline-lr 0.1 --optimizer momentum --dataset-size 1281167   (batch and learning "
      "rate)\n"
      "  trainfit estimate --trace mynet.trace.json --batch 64 --gpu h100   (your own model:\n"
      "      PYTHONPATH=python python3 -m trainfit.trace --help)");
  o->request.add_to(app);
  app.add_option("--timeline", o->timeline,
                 "write allocated and reserved bytes after every event as CSV");
  app.add_flag("--explain", o->explain, "also list the largest tensors alive at the peak");
  app.add_option("--html", o->html,
                 "also write a self-contained HTML report: memory over both iterations, the "
                 "breakdown, the largest tensors");
  app.add_flag("--json", o->json, "print one JSON object");
  return [o](std::ostream& out, std::ostream& err) { return run_estimate(*o, out, err); };
}

}  // namespace trainfit
