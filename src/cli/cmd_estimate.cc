// trainfit estimate: peak GPU memory of two training iterations, with where it peaks and what
// it is made of.
#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "cli/cli.h"
#include "cli/model_source.h"
#include "cli/training_options.h"
#include "report/estimate_report.h"

namespace trainfit {
namespace {

struct EstimateOptionsFlags {
  ModelSourceOptions source;
  TrainingFlags training;
  DeviceFlags device;
  std::string timeline;
  bool json = false;
  bool explain = false;
};

int run_estimate(const EstimateOptionsFlags& o, std::ostream& out, std::ostream& err) {
  Result<ModelRequest> request = to_request(o.source);
  if (!request.ok()) return report_error(err, request.status());
  const KernelTarget target = request->options.target;
  Result<TrainingConfig> training = to_training_config(o.training, target);
  if (!training.ok()) return report_error(err, training.status());
  Result<DeviceProfile> device = to_device_profile(o.device, target);
  if (!device.ok()) return report_error(err, device.status());
  Result<AllocatorConfig> allocator = to_allocator_config(o.device);
  if (!allocator.ok()) return report_error(err, allocator.status());
  Result<Graph> graph = build_model(*request);
  if (!graph.ok()) return report_error(err, graph.status());
  EstimateOptions options;
  options.training = *training;
  options.device = *device;
  options.allocator = *allocator;
  options.timeline = !o.timeline.empty();
  options.explain = o.explain;
  Result<Estimate> e = estimate(*graph, options);
  if (!e.ok()) return report_error(err, e.status());
  if (!o.timeline.empty()) {
    std::ofstream f(o.timeline);
    if (!f) {
      return report_error(err,
                          invalid_argument(fmt::format("cannot write --timeline '{}'", o.timeline),
                                           "check that its folder exists and is writable"));
    }
    f << timeline_csv(*graph, *e);
  }
  EstimateHeader h;
  h.model = request->name;
  h.batch = request->batch;
  h.precision = request->options.precision;
  h.optimizer = training->optimizer;
  h.resolved_impl = resolve_optimizer_impl(training->optimizer.impl, target);
  h.device = *device;
  h.training = *training;
  if (o.json) {
    out << estimate_json(h, *e).dump(2) << '\n';
  } else {
    out << estimate_text(h, *e);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_estimate(CLI::App& app) {
  auto o = std::make_shared<EstimateOptionsFlags>();
  app.footer(
      "Simulates two training iterations (forward, loss, backward, optimizer.step,\n"
      "zero_grad(set_to_none=True)) and PyTorch's CUDA caching allocator. Peak allocated and\n"
      "reserved are what torch.cuda.max_memory_allocated()/max_memory_reserved() would report;\n"
      "device used adds the CUDA context, as nvidia-smi shows it.\n\n"
      "Examples:\n"
      "  trainfit estimate --model resnet50 --batch 64 --gpu rtx4090\n"
      "  trainfit estimate --model vit_b_16 --batch 128 --precision amp-bf16 --optimizer adamw "
      "--gpu a100-80gb\n"
      "  trainfit estimate --model resnet50 --batch 256 --checkpoint 'layer*' --json\n"
      "  trainfit estimate --model gpt2 --seq-len 1024 --batch 8 --timeline memory.csv");
  add_model_source(app, o->source);
  add_training_flags(app, o->training);
  add_device_flags(app, o->device);
  app.add_option("--timeline", o->timeline,
                 "write allocated and reserved bytes after every event as CSV");
  app.add_flag("--explain", o->explain, "also list the largest tensors alive at the peak");
  app.add_flag("--json", o->json, "print one JSON object");
  return [o](std::ostream& out, std::ostream& err) { return run_estimate(*o, out, err); };
}

}  // namespace trainfit
