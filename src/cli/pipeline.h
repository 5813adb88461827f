// The estimate pipeline from parsed flags, shared by the commands that estimate (estimate,
// compare): request, training config, device profile, allocator, graph, estimate.
//
//   Result<EstimateRun> run = run_pipeline(source, training, device, {});
//   run->estimate.peak_allocated_bytes; estimate_json(run->header, run->estimate);
#pragma once

#include "cli/model_source.h"
#include "cli/training_options.h"
#include "report/estimate_report.h"

namespace trainfit {

struct PipelineExtras {
  bool timeline = false;
  bool explain = false;
};

struct EstimateRun {
  ModelRequest request;
  Graph graph;
  EstimateHeader header;
  Estimate estimate;
};

Result<EstimateRun> run_pipeline(const ModelSourceOptions& source, const TrainingFlags& training,
                                 const DeviceFlags& device, const PipelineExtras& extras);

}  // namespace trainfit
