// trainfit schedule: a learning-rate scheduler replayed as PyTorch steps it, before a run is
// spent on it; with a logged validation curve, ReduceLROnPlateau and early stopping replayed on
// the run that already happened.
#include <fmt/format.h>

#include <memory>

#include "cli/cli.h"
#include "cli/input_files.h"
#include "report/html.h"
#include "report/json.h"
#include "report/text.h"
#include "schedule/lr_scheduler.h"

namespace trainfit {
namespace {

struct ScheduleFlags {
  std::string scheduler;
  std::vector<std::string> sets;
  std::vector<std::string> lrs;
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  std::string interval;
  std::string metrics;
  std::string column;
  std::vector<std::string> early_stopping;
  std::string html;
  bool json = false;
};

Result<std::vector<double>> parse_lrs(const std::vector<std::string>& texts) {
  std::vector<double> lrs;
  for (const std::string& text : texts) {
    TF_ASSIGN_OR_RETURN(SpecValue v, parse_spec_value(text));
    std::vector<SpecValue> items = v.kind == SpecValue::Kind::kList ? v.list : std::vector{v};
    for (const SpecValue& item : items) {
      if (item.kind != SpecValue::Kind::kNumber) {
        return invalid_argument(fmt::format("--lr '{}' is not a number", text),
                                "e.g. --lr 0.1, or --lr 0.1,0.01 for two parameter groups");
      }
      lrs.push_back(item.number);
    }
  }
  return lrs;
}

Result<ScheduleRequest> to_schedule_request(const ScheduleFlags& o) {
  ScheduleRequest r;
  TF_ASSIGN_OR_RETURN(r.scheduler, parse_scheduler_spec(o.scheduler));
  for (const std::string& kv : o.sets) TF_RETURN_IF_ERROR(add_set(r.scheduler, kv));
  TF_ASSIGN_OR_RETURN(r.lrs, parse_lrs(o.lrs));
  bool sets_lr = r.scheduler.name == "OneCycleLR" || r.scheduler.name == "CyclicLR";
  if (r.lrs.empty() && sets_lr) r.lrs = {0.0};  // the scheduler sets the groups' lr itself
  r.epochs = o.epochs;
  r.steps_per_epoch = o.steps_per_epoch;
  if (o.interval.empty()) {
    r.interval = o.steps_per_epoch > 0 ? StepInterval::kStep : StepInterval::kEpoch;
  } else if (o.interval == "epoch" || o.interval == "step") {
    r.interval = o.interval == "epoch" ? StepInterval::kEpoch : StepInterval::kStep;
  } else {
    return invalid_argument(fmt::format("--interval '{}' is not epoch or step", o.interval),
                            "step: scheduler.step() after every iteration; epoch: after every "
                            "epoch");
  }
  if (!o.metrics.empty()) {
    TF_ASSIGN_OR_RETURN(r.metrics, read_metrics_file(o.metrics, o.column));
  }
  if (!o.column.empty() && o.metrics.empty()) {
    return invalid_argument("--column needs --metrics", "add --metrics FILE.csv");
  }
  if (!o.early_stopping.empty()) {
    EarlyStoppingOptions es;
    for (const std::string& kv : o.early_stopping) TF_RETURN_IF_ERROR(set_early_stopping(es, kv));
    r.early_stopping = es;
  }
  return r;
}

int run_schedule(const ScheduleFlags& o, std::ostream& out, std::ostream& err) {
  Result<ScheduleRequest> request = to_schedule_request(o);
  if (!request.ok()) return report_error(err, request.status());
  Result<Schedule> schedule = make_schedule(*request);
  if (!schedule.ok()) return report_error(err, schedule.status());
  if (!o.html.empty()) {
    Status st = write_report_file("--html", o.html, schedule_html(*schedule));
    if (!st.ok()) return report_error(err, st);
  }
  if (o.json) {
    out << schedule_json(*schedule).dump(2) << '\n';
  } else {
    out << schedule_text(*schedule);
  }
  return kExitOk;
}

std::string schedulers_help() {
  std::string text = "Schedulers (PyTorch's class and keyword names):\n";
  for (const SchedulerInfo& s : known_schedulers()) {
    text += fmt::format("  {}({})\n      {}\n", s.name, s.signature, s.summary);
  }
  return text;
}

}  // namespace

CommandRun setup_schedule(CLI::App& app) {
  auto o = std::make_shared<ScheduleFlags>();
  app.footer(
      "The learning rate at every epoch (or iteration) as torch.optim.lr_scheduler computes it:\n"
      "lr[i] is optimizer.param_groups[0][\"lr\"] before the i-th scheduler.step(). Write the\n"
      "scheduler as in your script, or give its name and its keywords with --set.\n\n" +
      schedulers_help() +
      "\nExamples:\n"
      "  trainfit schedule --scheduler MultiStepLR --set milestones=30,80 --lr 0.1 --epochs 100\n"
      "  trainfit schedule --scheduler 'CosineAnnealingWarmRestarts(T_0=10, T_mult=2, "
      "eta_min=1e-6)' --lr 0.1 --epochs 70\n"
      "  trainfit schedule --scheduler 'SequentialLR(schedulers=[LinearLR(start_factor=0.01, "
      "total_iters=500), CosineAnnealingLR(T_max=9500)], milestones=[500])' --lr 3e-4 --epochs "
      "20 --steps-per-epoch 500\n"
      "  trainfit schedule --scheduler OneCycleLR --set max_lr=0.01 --epochs 10 "
      "--steps-per-epoch 390\n"
      "  trainfit schedule --scheduler ReduceLROnPlateau --set factor=0.5 --set patience=10 --lr "
      "0.001 --metrics metrics.csv --column val_loss --early-stopping patience=10 "
      "--early-stopping min_delta=0.001");
  app.add_option("--scheduler", o->scheduler, "NAME or NAME(keyword=value, ...)")->required();
  app.add_option("--set", o->sets, "a keyword of the scheduler, KEY=VALUE (repeatable)");
  app.add_option("--lr", o->lrs,
                 "the optimizer's learning rate; several (--lr 0.1,0.01) for parameter groups");
  app.add_option("--epochs", o->epochs, "epochs to show (default with --metrics: its length)");
  app.add_option("--steps-per-epoch", o->steps_per_epoch,
                 "iterations per epoch, len(train_loader); the scheduler then steps every "
                 "iteration");
  app.add_option("--interval", o->interval,
                 "when scheduler.step() is called: epoch or step (default: step with "
                 "--steps-per-epoch)");
  app.add_option("--metrics", o->metrics,
                 "CSV with a validation value per epoch (metrics.csv, TensorBoard's CSV export)");
  app.add_option("--column", o->column, "the --metrics column to replay (default: the one metric)");
  app.add_option("--early-stopping", o->early_stopping,
                 "replay note 004's EarlyStopping: patience=N, min_delta=X, mode=min|max "
                 "(repeatable)");
  app.add_flag("--json", o->json, "print one JSON object");
  app.add_option("--html", o->html, "also write a self-contained HTML report with the plots");
  return [o](std::ostream& out, std::ostream& err) { return run_schedule(*o, out, err); };
}

}  // namespace trainfit
