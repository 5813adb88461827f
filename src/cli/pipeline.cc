#include "cli/pipeline.h"

namespace trainfit {

Result<EstimateRun> run_pipeline(const ModelSourceOptions& source, const TrainingFlags& flags,
                                 const DeviceFlags& device_flags, const PipelineExtras& extras) {
  EstimateRun run;
  TF_ASSIGN_OR_RETURN(run.request, to_request(source));
  const KernelTarget target = run.request.options.target;
  TF_ASSIGN_OR_RETURN(TrainingConfig training,
                      to_training_config(flags, target, find_model(run.request.name)));
  TF_ASSIGN_OR_RETURN(DeviceProfile device, to_device_profile(device_flags, target));
  TF_ASSIGN_OR_RETURN(AllocatorConfig allocator, to_allocator_config(device_flags));
  TF_ASSIGN_OR_RETURN(run.graph, build_model(run.request));
  EstimateOptions options;
  options.training = training;
  options.device = device;
  options.allocator = allocator;
  options.timeline = extras.timeline;
  options.explain = extras.explain;
  TF_ASSIGN_OR_RETURN(run.estimate, estimate(run.graph, options));
  EstimateHeader& h = run.header;
  h.model = run.request.name;
  h.batch = run.request.batch;
  h.precision = run.request.options.precision;
  h.optimizer = training.optimizer;
  h.resolved_impl = resolve_optimizer_impl(training.optimizer.impl, target);
  h.device = device;
  h.training = training;
  return run;
}

}  // namespace trainfit
