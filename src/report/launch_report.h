// The `trainfit launch` report as data: the configurations searched (plan/launch.h), the
// fastest one's estimate, batch and learning rate, its torchrun line and the code changes the
// training script needs. text.h and json.h render it.
//
//   Result<LaunchReport> r = make_launch_report(request, {.max_gpus = 4, .host_cores = 32});
//   r->command;   // "OMP_NUM_THREADS=8 torchrun --standalone --nproc_per_node=4 train.py"
#pragma once

#include <string>
#include <vector>

#include "plan/knobs.h"
#include "plan/launch.h"
#include "report/estimate_report.h"

namespace trainfit {

struct LaunchOptions {
  int max_gpus = 1;    // GPUs on the node
  int host_cores = 1;  // its CPU cores, shared by the ranks
};

struct LaunchReport {
  LaunchOptions options;
  std::string model;
  std::string gpu;  // the card's display name
  Link link;        // between the cards
  FsdpBlocks fsdp;  // the units FSDP candidates wrap (none: FSDP was not tried)
  LaunchPlan plan;
  // With a plan that fits: the fastest configuration's estimate (with its scaling plan), the
  // environment and command that start it, and what the script needs.
  std::optional<EstimateReport> chosen;
  int omp_threads = 1;
  std::string command;
  std::vector<std::string> environment;  // NCCL settings where they matter, with why
  std::vector<std::string> code_changes;
};

Result<LaunchReport> make_launch_report(const TrainingRequest& request,
                                        const LaunchOptions& options);

}  // namespace trainfit
