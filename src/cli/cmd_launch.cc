// trainfit launch: the GPU count, strategy, per-GPU batch and accumulation that reproduce a
// baseline's effective batch fastest within the card's memory, with the torchrun line and the
// changes the training script needs.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "cli/cli.h"
#include "cli/input_files.h"
#include "cli/request_cli.h"
#include "report/html.h"
#include "report/json.h"
#include "report/text.h"

namespace trainfit {
namespace {

struct LaunchFlags {
  RequestCli request{RequestCommand::kLaunch};
  int cores = 0;  // 0: this host's
  std::string html;
  bool json = false;
};

Result<TrainingRequest> to_launch_request(const LaunchFlags& o) {
  const RequestCli& flags = o.request;
  if (!flags.given("gpu") || flags.text("gpu") == "all") {
    return invalid_argument("launch needs the GPU the run will use",
                            "add --gpu NAME (see `trainfit gpus`)");
  }
  if (flags.given("device_profile") && flags.text("device_profile") != "cuda") {
    return unsupported("launch plans for CUDA GPUs", "drop --device-profile cpu");
  }
  if (!flags.given("baseline_batch") || !flags.given("baseline_lr")) {
    return invalid_argument("launch needs the baseline's batch and learning rate",
                            "add --baseline-batch B --baseline-lr LR (what the paper or config "
                            "trained with)");
  }
  return flags.to_request();
}

int run_launch(const LaunchFlags& o, std::ostream& out, std::ostream& err) {
  Result<TrainingRequest> request = to_launch_request(o);
  if (!request.ok()) return report_error(err, request.status());
  if (o.cores < 0 || o.cores > 1 << 20) {
    return report_error(err,
                        invalid_argument(fmt::format("--cores {} is not a core count", o.cores),
                                         "give the node's CPU cores, e.g. --cores 32"));
  }
  const int cores =
      o.cores > 0 ? o.cores : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  Result<LaunchReport> report =
      make_launch_report(*request, {.max_gpus = request->gpus, .host_cores = cores});
  if (!report.ok()) return report_error(err, report.status());
  if (!o.html.empty()) {
    Status st = write_report_file("--html", o.html, launch_html(*report));
    if (!st.ok()) return report_error(err, st);
  }
  if (o.json) {
    out << launch_json(*report).dump(2) << '\n';
  } else {
    out << launch_text(*report);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_launch(CLI::App& app) {
  auto o = std::make_shared<LaunchFlags>();
  app.footer(
      "Reaches the baseline's effective batch exactly: per-GPU batch x GPUs x micro-batches =\n"
      "--baseline-batch. For each GPU count from 1 to --gpus that divides it, and for DDP and\n"
      "(with an optimizer that keeps state) DDP with ZeroRedundancyOptimizer, it takes the\n"
      "largest per-GPU batch that fits the card (fewest micro-batches), then picks the fastest\n"
      "optimizer step and the fewest GPU-seconds. The step time includes the part of the\n"
      "gradients' all-reduce that backward does not hide, over --link or at --bus-bandwidth\n"
      "(measure yours with nccl-tests' all_reduce_perf). OMP_NUM_THREADS shares this host's\n"
      "cores among the ranks.\n\n"
      "Examples:\n"
      "  trainfit launch --model resnet50 --gpu rtx4090 --gpus 4 --baseline-batch 256 "
      "--baseline-lr 0.1 --optimizer momentum\n"
      "  trainfit launch --model act --gpu rtx4090 --gpus 2 --baseline-batch 64 "
      "--baseline-lr 1e-5 --json");
  o->request.add_to(app);
  app.get_option("--gpus")->description("GPUs the node has: plans use 1 to this many");
  app.add_option("--cores", o->cores,
                 "CPU cores of the node the run will use (default: this host's): "
                 "OMP_NUM_THREADS is its share per rank");
  app.add_flag("--json", o->json, "print one JSON object");
  app.add_option("--html", o->html,
                 "also write a self-contained HTML report: step time and GPU-seconds of every "
                 "configuration, the torchrun line");
  return [o](std::ostream& out, std::ostream& err) { return run_launch(*o, out, err); };
}

}  // namespace trainfit
