// trainfit summary: one row per module with output shape, parameters and the bytes autograd
// keeps for backward, per sample and for the batch.
#include <memory>

#include "cli/cli.h"
#include "cli/input_files.h"
#include "cli/request_cli.h"
#include "report/html.h"
#include "report/json.h"
#include "report/summary_report.h"
#include "report/text.h"

namespace trainfit {
namespace {

struct SummaryFlags {
  RequestCli request{RequestCommand::kSummary};  // the model options only
  int depth = -1;
  std::string html;
  bool json = false;
};

constexpr int kDefaultTextDepth = 3;

int run_summary(const SummaryFlags& o, std::ostream& out, std::ostream& err) {
  Result<TrainingRequest> request = o.request.to_request();
  if (!request.ok()) return report_error(err, request.status());
  Result<Summary> s = make_summary(*request);
  if (!s.ok()) return report_error(err, s.status());
  if (!o.html.empty()) {
    Status st = write_report_file("--html", o.html, summary_html(*s, o.depth));
    if (!st.ok()) return report_error(err, st);
  }
  if (o.json) {
    out << summary_json(*s, o.depth).dump(2) << '\n';
  } else {
    out << summary_text(*s, o.depth < 0 ? kDefaultTextDepth : o.depth);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_summary(CLI::App& app) {
  auto o = std::make_shared<SummaryFlags>();
  app.footer(
      "Kept/sample and Kept/batch are the bytes autograd holds for backward at the end of the\n"
      "forward pass (parameters and inputs excluded), at batch 1 and at --batch. A storage\n"
      "counts once, in the module whose op allocated it.\n\n"
      "Examples:\n"
      "  trainfit summary --model resnet50 --batch 32\n"
      "  trainfit summary --model vit_b_16 --depth 2 --json\n"
      "  trainfit summary --model gpt2 --seq-len 512 --precision amp-bf16\n"
      "  trainfit summary --trace model.trace.json --batch 64   (python3 -m trainfit.trace)");
  o->request.add_to(app);
  app.add_option("--depth", o->depth, "deepest module level to show (text default 3, JSON all)");
  app.add_flag("--json", o->json, "print one JSON object");
  app.add_option("--html", o->html,
                 "also write a self-contained HTML report: the module table with bars (all "
                 "levels unless --depth)");
  return [o](std::ostream& out, std::ostream& err) { return run_summary(*o, out, err); };
}

}  // namespace trainfit
