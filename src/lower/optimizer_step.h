// The allocations of one optimizer.step(), as the implementation PyTorch runs makes them.
//
//   OptimizerStep step;
//   step.optimizer = config.optimizer;
//   step.target = graph.target;
//   step.first_step = true;
//   step.params = {{0, 4096}, {1, 16}};   // parameters that have a gradient, in order
//   lower_optimizer_step(step, sink);      // sink.alloc() / sink.release() in order
#pragma once

#include <cstdint>
#include <vector>

#include "lower/events.h"
#include "lower/training.h"

namespace trainfit {

// The implementation PyTorch picks when none is given: foreach for CUDA tensors on 2.x
// (optimizer.py _default_to_fused_or_foreach), the for-loop on CPU and on 1.13.
OptimizerImpl resolve_optimizer_impl(OptimizerImpl impl, const KernelTarget& target);

// PyTorch 1.13's torch.autograd.profiler.record_function (around Optimizer.step, FSDP's forward
// and hooks): its __init__ sets a placeholder torch.zeros(1), which __enter__ replaces with a
// 288-byte CPU handle tensor (profiler._record_function_enter) held to the block's end. 2.x
// returns a script object.
inline constexpr int64_t kRecordFunctionHandleBytes = 288;

struct StepParam {
  int32_t index = 0;  // into Graph::params
  int64_t bytes = 0;
  int group = 0;      // its parameter group: groups step one after another
  int64_t numel = 0;  // elements (bitsandbytes sizes its state by them)
};

struct OptimizerStep {
  OptimizerConfig optimizer;
  KernelTarget target;
  bool first_step = false;   // state is created at the first step
  bool grad_scaler = false;  // GradScaler.step() unscales the gradients first
  // GradScaler found inf or NaN in the unscaled gradients: the optimizer does not step.
  bool skipped = false;
  // Optimizer.step calls inside one another: 2 for ZeroRedundancyOptimizer.step around its
  // local optimizer's, each holding its own record_function handle on 1.13.
  int nested_steps = 1;
  std::vector<StepParam> params;
};

// bitsandbytes' optimizers with 8-bit state (paged or not).
bool is_8bit(OptimizerKind kind);
// Any of bitsandbytes' optimizers: 8-bit, or paged.
bool is_bitsandbytes(OptimizerKind kind);

void lower_optimizer_step(const OptimizerStep& step, EventSink& sink);

}  // namespace trainfit
