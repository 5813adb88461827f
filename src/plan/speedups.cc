#include "plan/speedups.h"

#include <algorithm>

#include "base/parallel.h"
#include "pipeline/estimator.h"

namespace trainfit {

std::vector<SpeedupChange> speedup_changes(const TrainingRequest& request) {
  const int sm = request.device.sm;
  const bool fp32 = request.precision == Precision::kFp32;
  std::vector<SpeedupChange> candidates;
  if (fp32 && sm >= 80) {
    candidates.push_back({"amp_bf16",
                          "torch.autocast(\"cuda\", torch.bfloat16) (--precision amp-bf16)",
                          [](TrainingRequest& r) { r.precision = Precision::kAmpBf16; }});
  } else if (fp32) {
    candidates.push_back({"amp_fp16",
                          "torch.autocast(\"cuda\", torch.float16) and a GradScaler "
                          "(--precision amp-fp16)",
                          [](TrainingRequest& r) { r.precision = Precision::kAmpFp16; }});
  }
  if (fp32 && !request.tf32 && sm >= 80) {
    candidates.push_back({"tf32", "torch.backends.cuda.matmul.allow_tf32 = True (--tf32)",
                          [](TrainingRequest& r) { r.tf32 = true; }});
  }
  if (request.memory_format == MemoryFormat::kChannelsFirst) {
    candidates.push_back(
        {"channels_last", "model and batch in torch.channels_last (--memory-format channels_last)",
         [](TrainingRequest& r) { r.memory_format = MemoryFormat::kChannelsLast; }});
  }
  candidates.push_back({"batch_x2", "twice the batch, if it fits (trainfit fit)",
                        [](TrainingRequest& r) { r.batch *= 2; }});
  if (request.cuda_default_device) {
    candidates.push_back({"no_default_device",
                          "device= on each tensor instead of torch.set_default_device",
                          [](TrainingRequest& r) { r.cuda_default_device = false; }});
  }
  return candidates;
}

PredictedChange predict_change(const TrainingRequest& request, const SpeedupChange& change,
                               const EstimateRun* built) {
  // On a copy of the request; a change the model cannot take is not offered.
  TrainingRequest changed = request;
  change.edit(changed);
  PredictedChange out{change.change, change.how, std::nullopt};
  const Result<std::optional<StepTime>> t = predict_step_time(changed, built);
  if (t.ok()) out.time = *t;
  return out;
}

std::vector<PredictedChange> predict_changes(const TrainingRequest& request,
                                             const EstimateRun* built) {
  const std::vector<SpeedupChange> changes = speedup_changes(request);
  std::vector<PredictedChange> out(changes.size());
  parallel_for(changes.size(),
               [&](size_t, size_t i) { out[i] = predict_change(request, changes[i], built); });
  return out;
}

std::vector<Speedup> rank_speedups(const std::vector<PredictedChange>& changes,
                                   const StepTime& now) {
  std::vector<Speedup> out;
  if (now.step_s <= 0 || now.samples_per_s <= 0) return out;
  auto keep = [&](std::string change, std::string how, double step_s, double samples_per_s) {
    const double gain = samples_per_s / now.samples_per_s - 1;
    if (gain >= kSpeedupThreshold) {
      out.push_back({std::move(change), std::move(how), step_s, samples_per_s, gain});
    }
  };
  for (const PredictedChange& c : changes) {
    if (c.time) keep(c.change, c.how, c.time->step_s, c.time->samples_per_s);
  }
  if (now.gpu_only_s > 0 && now.cpu_bound_s > kSpeedupThreshold * now.step_s) {
    keep("host_free",
         "CUDA graphs (torch.compile(mode=\"reduce-overhead\")): no waits for "
         "the host",
         now.gpu_only_s, static_cast<double>(now.samples) / now.gpu_only_s);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Speedup& a, const Speedup& b) { return a.gain > b.gain; });
  return out;
}

std::vector<Speedup> step_speedups(const TrainingRequest& request, const StepTime& now,
                                   const EstimateRun* built) {
  if (now.step_s <= 0 || now.samples_per_s <= 0) return {};
  return rank_speedups(predict_changes(request, built), now);
}

}  // namespace trainfit
