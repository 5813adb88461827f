#include <nlohmann/json.hpp>

#include "report/json.h"
#include "report/loader_report.h"
#include "report/text.h"

namespace trainfit {

nlohmann::json loader_json(const LoaderReport& report) {
  using nlohmann::json;
  const LoaderPlan& plan = report.plan;
  const LoaderMemory& m = plan.memory;
  json env = json::object();
  for (const auto& [name, value] : plan.env) env[name] = value;
  json curve = json::array();
  for (const WorkerPoint& w : plan.curve) {
    curve.push_back({{"num_workers", w.num_workers},
                     {"samples_per_s", w.samples_per_s},
                     {"measured", w.measured}});
  }
  json warnings = json::array();
  for (const LoaderWarning& w : plan.warnings) {
    warnings.push_back({{"code", w.code}, {"message", w.message}, {"fix", w.fix}});
  }
  return {
      {"profile", report.profile->source},
      {"dataset", report.profile->dataset},
      {"dataset_length", report.profile->length},
      {"chosen", plan.chosen},
      {"batch", plan.batch},
      {"num_workers", plan.num_workers},
      {"prefetch_factor", plan.prefetch_factor ? json(*plan.prefetch_factor) : json(nullptr)},
      {"pin_memory", plan.pin_memory},
      {"persistent_workers", plan.persistent_workers},
      {"start_method", plan.start_method},
      {"env", env},
      {"dataloader", dataloader_call(plan)},
      {"step_time_s", plan.step_time_s},
      {"step_time_from", plan.step_time_from},
      {"loader_samples_per_s", plan.loader_samples_per_s},
      {"gpu_samples_per_s", plan.gpu_samples_per_s},
      {"samples_per_s", plan.samples_per_s},
      {"receive_s", plan.receive_s},
      {"bottleneck", plan.bottleneck},
      {"epoch_time_s", plan.epoch_s ? json(*plan.epoch_s) : json(nullptr)},
      {"usable_cores", plan.usable_cores},
      {"host_ram_bytes", m.host_ram_bytes},
      {"host_ram_first_epoch_bytes", m.host_ram_first_epoch_bytes},
      {"shm_bytes", m.shm_bytes},
      {"pinned_bytes", m.pinned_bytes},
      {"memory",
       {{"main_bytes", m.main_bytes},
        {"worker_own_bytes", m.worker_own_bytes},
        {"copyable_bytes", m.copyable_bytes},
        {"worker_copy_first_epoch_bytes", m.worker_copy_first_epoch_bytes},
        {"worker_copy_bytes", m.worker_copy_bytes},
        {"batch_bytes", m.batch_bytes},
        {"batches_in_flight", m.batches_in_flight},
        {"open_fds", m.open_fds},
        {"maps", m.maps},
        {"fork_commit_bytes", m.fork_commit_bytes}}},
      {"workers", curve},
      {"warnings", warnings},
  };
}

}  // namespace trainfit
