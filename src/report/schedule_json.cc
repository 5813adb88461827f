#include "report/json.h"

namespace trainfit {
namespace {

std::string_view mode_name(MetricMode m) {
  return m == MetricMode::kMin ? "min" : "max";
}

nlohmann::json stop_json(const StopReplay& r) {
  return {{"patience", r.patience},
          {"stopped_epoch", r.stopped_epoch ? nlohmann::json(*r.stopped_epoch) : nlohmann::json()},
          {"best_epoch", r.best_epoch},
          {"best_value", r.best_value}};
}

}  // namespace

std::string_view interval_name(StepInterval i) {
  return i == StepInterval::kEpoch ? "epoch" : "step";
}

nlohmann::json schedule_json(const Schedule& s) {
  nlohmann::json j;
  j["scheduler"] = s.scheduler;
  j["interval"] = interval_name(s.interval);
  j["epochs"] = s.epochs;
  j["steps_per_epoch"] =
      s.steps_per_epoch > 0 ? nlohmann::json(s.steps_per_epoch) : nlohmann::json();
  j["steps"] = s.lrs.front().size();
  j["lr"] = s.lrs.front();
  if (s.lrs.size() > 1) j["lr_groups"] = s.lrs;
  j["notes"] = s.notes;
  if (s.metrics) {
    j["metrics"] = {{"column", s.metrics->column}, {"values", s.metrics->values}};
  }
  if (s.plateau) {
    j["plateau"] = {{"mode", mode_name(s.plateau->mode)},
                    {"factor", s.plateau->factor},
                    {"patience", s.plateau->patience},
                    {"threshold", s.plateau->threshold},
                    {"threshold_mode", s.plateau->threshold_relative ? "rel" : "abs"},
                    {"cooldown", s.plateau->cooldown},
                    {"min_lr", s.plateau->min_lrs}};
    j["plateau"]["drops"] = nlohmann::json::array();
    for (const PlateauDrop& d : s.drops) {
      j["plateau"]["drops"].push_back({{"epoch", d.epoch}, {"lr", d.lrs}});
    }
    j["plateau"]["patience_sweep"] = nlohmann::json::array();
    for (const PlateauReplay& r : s.plateau_sweep) {
      j["plateau"]["patience_sweep"].push_back(
          {{"patience", r.patience}, {"drop_epochs", r.drop_epochs}, {"final_lr", r.final_lr}});
    }
  }
  if (s.stop) {
    j["stopped_epoch"] =
        s.stop->stopped_epoch ? nlohmann::json(*s.stop->stopped_epoch) : nlohmann::json();
    j["best_epoch"] = s.stop->best_epoch;
    j["best_value"] = s.stop->best_value;
    j["early_stopping"] = {{"patience", s.early_stopping->patience},
                           {"min_delta", s.early_stopping->min_delta},
                           {"mode", mode_name(s.early_stopping->mode)}};
    j["early_stopping"]["patience_sweep"] = nlohmann::json::array();
    for (const StopReplay& r : s.stop_sweep)
      j["early_stopping"]["patience_sweep"].push_back(stop_json(r));
  }
  return j;
}

}  // namespace trainfit
