// trainfit loader: the DataLoader settings that feed the GPU, from a loader profile (what
// `python3 -m trainfit.loader` measured of the Dataset on this host) and the GPU's rate (a model
// and GPU, or --step-time): workers, prefetch, pinning, host RAM, /dev/shm, and what would end
// the run.
#include <fmt/format.h>

#include <memory>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/input_files.h"
#include "cli/request_cli.h"
#include "report/html.h"
#include "report/json.h"
#include "report/text.h"

namespace trainfit {
namespace {

struct LoaderFlags {
  RequestCli request{RequestCommand::kLoader};
  std::string profile;
  std::string step_time;
  std::optional<int64_t> num_workers;
  std::optional<int64_t> prefetch_factor;
  std::string pin_memory;
  std::string persistent_workers;
  std::string shm_size;
  std::string memory_limit;
  std::string commit_limit;
  std::optional<int64_t> cpus;
  std::string html;
  bool json = false;
};

Result<std::optional<bool>> parse_switch(std::string_view option, const std::string& text) {
  if (text.empty()) return std::optional<bool>();
  if (text == "true" || text == "True" || text == "1") return std::optional<bool>(true);
  if (text == "false" || text == "False" || text == "0") return std::optional<bool>(false);
  return invalid_argument(fmt::format("{} '{}': use true or false", option, text),
                          fmt::format("e.g. {} true", option));
}

Result<std::optional<int64_t>> optional_size(std::string_view option, const std::string& text) {
  if (text.empty()) return std::optional<int64_t>();
  TF_ASSIGN_OR_RETURN(const int64_t bytes, parse_size(option, text));
  return std::optional<int64_t>(bytes);
}

Result<LoaderReportRequest> to_loader_request(const LoaderFlags& o, bool batch_given) {
  if (o.profile.empty()) {
    return invalid_argument("loader needs --profile FILE",
                            "measure the Dataset first: python3 -m trainfit.loader --dataset "
                            "MODULE:FACTORY --out loader.json");
  }
  LoaderReportRequest q;
  const bool model =
      o.request.given("model") || o.request.given("trace") || o.request.given("hf_config");
  if (model == !o.step_time.empty()) {
    return invalid_argument(
        model ? "give a model with --gpu or --step-time, not both"
              : "loader needs the GPU's rate: a model and GPU, or --step-time",
        "e.g. --model resnet50 --gpu rtx4090 --batch 64, or --step-time 80ms --batch 64");
  }
  if (!batch_given) {
    return invalid_argument("loader needs --batch N", "the batch size training uses");
  }
  if (model) {
    TF_ASSIGN_OR_RETURN(q.training, o.request.to_request());
  } else {
    TF_ASSIGN_OR_RETURN(q.step_time_s, parse_duration("--step-time", o.step_time));
    TF_ASSIGN_OR_RETURN(const TrainingRequest batch_only, o.request.to_request());
    q.batch = batch_only.batch;
  }
  q.given.num_workers = o.num_workers;
  q.given.prefetch_factor = o.prefetch_factor;
  TF_ASSIGN_OR_RETURN(q.given.pin_memory, parse_switch("--pin-memory", o.pin_memory));
  TF_ASSIGN_OR_RETURN(q.given.persistent_workers,
                      parse_switch("--persistent-workers", o.persistent_workers));
  if ((q.given.prefetch_factor || q.given.persistent_workers) && !q.given.num_workers) {
    return invalid_argument("--prefetch-factor and --persistent-workers judge given settings",
                            "give --num-workers N with them");
  }
  TF_ASSIGN_OR_RETURN(q.host.shm_bytes, optional_size("--shm-size", o.shm_size));
  TF_ASSIGN_OR_RETURN(q.host.memory_limit_bytes, optional_size("--memory-limit", o.memory_limit));
  TF_ASSIGN_OR_RETURN(q.host.commit_limit_bytes, optional_size("--commit-limit", o.commit_limit));
  q.host.cpus = o.cpus;
  TF_ASSIGN_OR_RETURN(q.profile, read_loader_profile_file(o.profile));
  return q;
}

int run_loader(const LoaderFlags& o, bool batch_given, std::ostream& out, std::ostream& err) {
  Result<LoaderReportRequest> request = to_loader_request(o, batch_given);
  if (!request.ok()) return report_error(err, request.status());
  Result<LoaderReport> report = make_loader_report(*request);
  if (!report.ok()) return report_error(err, report.status());
  if (!o.html.empty()) {
    Status st = write_report_file("--html", o.html, loader_html(*report));
    if (!st.ok()) return report_error(err, st);
  }
  if (o.json) {
    out << loader_json(*report).dump(2) << '\n';
  } else {
    out << loader_text(*report);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_loader(CLI::App& app) {
  auto o = std::make_shared<LoaderFlags>();
  app.footer(
      "First measure the Dataset on the host that trains (a few seconds, with PyTorch's own\n"
      "DataLoader):\n"
      "  python3 -m trainfit.loader --dataset mypkg.data:make_train_set --batch 32 --out "
      "loader.json\n"
      "then plan for the GPU's rate. Without --num-workers trainfit chooses: the fewest workers\n"
      "that deliver the GPU's samples/s with 10% headroom on the usable cores, within the\n"
      "memory limits; with it, trainfit judges your settings. Host RAM is PSS over the run:\n"
      "the main process, each worker's private memory (a forked worker copies the pages of the\n"
      "Dataset's Python objects as it reads them), the batches in /dev/shm and the pinned\n"
      "copies. Each warning names what would end the run and the fix.\n\n"
      "Examples:\n"
      "  trainfit loader --profile loader.json --step-time 80ms --batch 32\n"
      "  trainfit loader --profile loader.json --model act --batch 8 --gpu rtx4090\n"
      "  trainfit loader --profile loader.json --step-time 80ms --batch 32 --num-workers 12 "
      "--prefetch-factor 4\n"
      "  trainfit loader --profile loader.json --step-time 0.2s --batch 64 --shm-size 64MB "
      "--memory-limit 16GB --json");
  app.add_option("--profile", o->profile, "the loader profile from python3 -m trainfit.loader")
      ->required();
  o->request.add_to(app);
  app.add_option("--step-time", o->step_time,
                 "the GPU's time per batch instead of a model, e.g. 80ms or 0.08s");
  app.add_option("--num-workers", o->num_workers, "judge these settings instead of choosing");
  app.add_option("--prefetch-factor", o->prefetch_factor, "with --num-workers");
  app.add_option("--pin-memory", o->pin_memory, "true (default) or false");
  app.add_option("--persistent-workers", o->persistent_workers,
                 "with --num-workers: true (default) or false");
  app.add_option("--shm-size", o->shm_size,
                 "/dev/shm where the run will be, if not this host's (Docker's default: 64MB)");
  app.add_option("--memory-limit", o->memory_limit,
                 "the run's memory limit (a container's or cgroup's), if not this host's");
  app.add_option("--commit-limit", o->commit_limit,
                 "a commit limit as vm.overcommit_memory=2 enforces, if not this host's");
  app.add_option("--cpus", o->cpus, "the cores the run may use, if not the probe's");
  app.add_flag("--json", o->json, "print one JSON object");
  app.add_option("--html", o->html,
                 "also write a self-contained HTML report: throughput against workers with the "
                 "GPU's rate, host memory, the DataLoader line");
  return [o, &app](std::ostream& out, std::ostream& err) {
    return run_loader(*o, app.get_option("--batch")->count() > 0, out, err);
  };
}

}  // namespace trainfit
