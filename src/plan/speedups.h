// What would shorten a training step: the changes a user can make to an eager PyTorch step,
// each predicted by the same cost model on the same GPU, ranked by what they gain.
//
//   std::vector<Speedup> s = step_speedups(request, *estimate.time);
//   s.front().change;         // "amp_bf16"
//   s.front().samples_per_s;  // predicted with torch.autocast("cuda", torch.bfloat16)
//
// The changes: autocast to bf16 (fp16 before Ampere) from fp32; TF32 matmuls from fp32; the
// channels_last memory format where cuDNN's convolutions transpose NCHW; twice the batch (per
// sample, whether it fits is `trainfit fit`'s question); dropping torch.set_default_device,
// whose mode intercepts every call; and, where the GPU waits for the host, the kernels alone
// (a CUDA graph of the step, or torch.compile's mode="reduce-overhead"). A change is listed when
// it raises samples per second by at least 2%.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "estimate/step_time.h"
#include "pipeline/estimator.h"
#include "pipeline/request.h"

namespace trainfit {

struct Speedup {
  std::string change;  // stable: amp_bf16, amp_fp16, tf32, channels_last, batch_x2,
                       // no_default_device, host_free
  std::string how;     // what to change in the training script
  double step_s = 0;   // predicted step with the change
  double samples_per_s = 0;
  double gain = 0;  // samples per second over the current step's, minus 1
};

inline constexpr double kSpeedupThreshold = 0.02;

// `now` is the request's own step time. AMP is bf16 from compute capability 8.0, else fp16.
// A change whose request the model refuses is not offered. `built`: the request's own run, whose
// graph serves the changes that leave the model as it is.
std::vector<Speedup> step_speedups(const TrainingRequest& request, const StepTime& now,
                                   const EstimateRun* built = nullptr);

// The same in parts, so that the predictions can run beside the request's own estimate
// (base/parallel.h): the changes that apply, each one's step time (which does not depend on the
// step as it is), all of them side by side, and the ranking against the step as it is.
struct SpeedupChange {
  const char* change;
  const char* how;
  void (*edit)(TrainingRequest&);
};
std::vector<SpeedupChange> speedup_changes(const TrainingRequest& request);
struct PredictedChange {
  std::string change;
  std::string how;
  std::optional<StepTime> time;  // none: the model refuses the change, or no step time
};
PredictedChange predict_change(const TrainingRequest& request, const SpeedupChange& change,
                               const EstimateRun* built = nullptr);
std::vector<PredictedChange> predict_changes(const TrainingRequest& request,
                                             const EstimateRun* built = nullptr);
std::vector<Speedup> rank_speedups(const std::vector<PredictedChange>& changes,
                                   const StepTime& now);

}  // namespace trainfit
