// The `trainfit loader` report as data: the DataLoader plan for one loader profile and one GPU
// rate (a model's predicted step time on a GPU, or a step time given). text.h and json.h render
// it.
//
//   LoaderReportRequest q;
//   q.profile = profile;                 // parse_loader_profile, read by the front end
//   q.training = request;                // or q.step_time_s = 0.080
//   q.batch = 32;
//   Result<LoaderReport> r = make_loader_report(q);
//   r->plan.num_workers, r->plan.memory.host_ram_bytes ...
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "pipeline/request.h"
#include "plan/loader_plan.h"

namespace trainfit {

struct LoaderReportRequest {
  std::shared_ptr<const LoaderProfile> profile;
  std::optional<TrainingRequest> training;  // its batch is the loader's; needs a GPU
  std::optional<double> step_time_s;        // instead of a model
  int64_t batch = 1;                        // with step_time_s
  LoaderSettings given;
  HostOverrides host;
};

struct LoaderReport {
  std::shared_ptr<const LoaderProfile> profile;
  LoaderPlan plan;
};

Result<LoaderReport> make_loader_report(const LoaderReportRequest& request);

}  // namespace trainfit
