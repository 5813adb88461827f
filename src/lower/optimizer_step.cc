#include "lower/optimizer_step.h"

#include <algorithm>
#include <span>

namespace trainfit {
namespace {

constexpr int32_t kNoBuffer = -1;

void release(EventSink& sink, int32_t buffer) {
  if (buffer != kNoBuffer) sink.release(buffer);
}

// bitsandbytes' Optimizer2State (bitsandbytes/optim/optimizer.py init_state, update_step): at
// the first step each parameter gets two states. The 8-bit optimizers give a parameter with at
// least min_8bit_size (4096) elements two uint8 states and two float32 absmax vectors, one per
// 2048-element block, and smaller ones two float32 states; the 32-bit ones two float32 states,
// whatever the parameter's dtype. The update is one fused kernel per parameter, with no
// temporaries. The two 256-entry quantization maps are copied to the device once and shared.
// The paged optimizers make the states (get_state_buffer) of parameters with at least 1e5
// elements in unified memory; the absmax vectors and the maps stay ordinary tensors.
constexpr int64_t kMin8bitNumel = 4096;
constexpr int64_t kMinPagedNumel = 100'000;
constexpr int64_t kQuantBlock = 2048;
constexpr int64_t kQuantMapBytes = int64_t{256} * 4;

void step_group_bitsandbytes(const OptimizerStep& step, std::span<const StepParam> params,
                             EventSink& sink, bool& maps_made) {
  if (!step.first_step) return;
  const OptimizerKind kind = step.optimizer.kind;
  const bool paged = kind == OptimizerKind::kPagedAdamW || kind == OptimizerKind::kPagedAdamW8bit;
  const bool eight = is_8bit(kind);
  for (const StepParam& p : params) {
    const auto state = [&](int64_t bytes) {
      if (paged && p.numel >= kMinPagedNumel) {
        sink.alloc_paged(bytes, p.index);
      } else {
        sink.alloc(bytes, Category::kOptimizerState, false, p.index);
      }
    };
    if (!eight || p.numel < kMin8bitNumel) {
      state(p.numel * 4);
      state(p.numel * 4);
      continue;
    }
    if (!maps_made) {
      sink.alloc(kQuantMapBytes, Category::kOptimizerState, false, -1);
      sink.alloc(kQuantMapBytes, Category::kOptimizerState, false, -1);
      maps_made = true;
    }
    const int64_t blocks = (p.numel + kQuantBlock - 1) / kQuantBlock;
    state(p.numel);
    state(p.numel);
    sink.alloc(blocks * 4, Category::kOptimizerState, false, p.index);
    sink.alloc(blocks * 4, Category::kOptimizerState, false, p.index);
  }
}

// The optimizer's own arithmetic for one parameter group: state at the first step, and the
// temporaries of the chosen implementation (torch/optim/adam.py, adamw.py, sgd.py).
void step_group(const OptimizerStep& step, std::span<const StepParam> params, EventSink& sink) {
  const OptimizerConfig& opt = step.optimizer;
  const OptimizerImpl impl = resolve_optimizer_impl(opt.impl, step.target);
  const bool cuda = step.target.device == Device::kCuda;
  const bool adam = opt.kind == OptimizerKind::kAdam || opt.kind == OptimizerKind::kAdamW;
  const bool momentum = opt.kind == OptimizerKind::kMomentum;
  const double wd = opt.effective_weight_decay();
  // Weight decay as a gradient copy (grad.add(param, alpha=wd)): Adam and SGD, not AdamW.
  const bool decay_copies = wd != 0 && opt.kind != OptimizerKind::kAdamW;
  auto temporary = [&](int64_t bytes) {
    return sink.alloc(bytes, Category::kTemporary, false, -1);
  };
  auto state = [&](const StepParam& p, int64_t bytes, bool host) {
    sink.alloc(bytes, Category::kOptimizerState, host, p.index);
  };
  if (step.first_step && adam) {
    // Adam._init_group: per parameter a step counter (a host scalar unless fused or made under
    // a CUDA default device), exp_avg and exp_avg_sq like the parameter.
    const bool host_steps = impl != OptimizerImpl::kFused && cuda && !opt.step_on_device;
    for (const StepParam& p : params) {
      state(p, 4, host_steps);
      state(p, p.bytes, false);
      state(p, p.bytes, false);
    }
  }
  if (impl == OptimizerImpl::kLoop) {
    // _single_tensor_*: per parameter. A rebound local keeps the previous parameter's temporary
    // alive until the new one exists.
    int32_t prev_decayed = kNoBuffer;
    int32_t prev_denom = kNoBuffer;
    for (const StepParam& p : params) {
      release(sink, prev_decayed);
      prev_decayed = decay_copies ? temporary(p.bytes) : kNoBuffer;
      if (momentum && step.first_step) state(p, p.bytes, false);  // clone(grad)
      if (adam) {
        const int32_t root = temporary(p.bytes);   // exp_avg_sq.sqrt()
        const int32_t denom = temporary(p.bytes);  // ... / bias_correction2_sqrt
        release(sink, root);
        release(sink, prev_denom);
        prev_denom = denom;
      }
    }
    release(sink, prev_decayed);
    release(sink, prev_denom);
    return;
  }
  if (impl == OptimizerImpl::kFused) {
    if (momentum && step.first_step) {
      for (const StepParam& p : params) state(p, p.bytes, false);
    }
    return;
  }
  // _multi_tensor_*: list-wide temporaries, one tensor per parameter. A Python list lets go of
  // its items last first (CPython's list_dealloc), and so the allocator sees them freed.
  std::vector<int32_t> list;
  const auto release_list = [&] {
    for (auto b = list.rbegin(); b != list.rend(); ++b) release(sink, *b);
    list.clear();
  };
  if (decay_copies) {
    for (const StepParam& p : params) list.push_back(temporary(p.bytes));
  }
  if (momentum && step.first_step) {
    for (const StepParam& p : params) state(p, p.bytes, false);
  }
  if (adam) {
    release_list();                                                        // `del device_grads`
    for (const StepParam& p : params) list.push_back(temporary(p.bytes));  // _foreach_sqrt
  }
  release_list();
}

}  // namespace

bool is_8bit(OptimizerKind kind) {
  return kind == OptimizerKind::kAdam8bit || kind == OptimizerKind::kAdamW8bit ||
         kind == OptimizerKind::kPagedAdamW8bit;
}

bool is_bitsandbytes(OptimizerKind kind) {
  return is_8bit(kind) || kind == OptimizerKind::kPagedAdamW;
}

OptimizerImpl resolve_optimizer_impl(OptimizerImpl impl, const KernelTarget& target) {
  if (impl != OptimizerImpl::kDefault) return impl;
  const bool cuda2 = target.device == Device::kCuda && target.torch == TorchVersion::k2;
  return cuda2 ? OptimizerImpl::kForeach : OptimizerImpl::kLoop;
}

void lower_optimizer_step(const OptimizerStep& step, EventSink& sink) {
  // GradScaler.unscale_ (grad_scaler.py): inv_scale = _scale.double().reciprocal().float() and
  // a found_inf flag; the gradients are unscaled in place.
  std::vector<int32_t> unscale;
  if (step.grad_scaler) {
    const int32_t as_double = sink.alloc(8, Category::kTemporary, false, -1);
    const int32_t reciprocal = sink.alloc(8, Category::kTemporary, false, -1);
    unscale.push_back(sink.alloc(4, Category::kTemporary, false, -1));  // inv_scale
    sink.release(as_double);
    sink.release(reciprocal);
    unscale.push_back(sink.alloc(4, Category::kTemporary, false, -1));  // found_inf
  }
  if (step.skipped) {
    for (int32_t b : unscale) sink.release(b);
    return;
  }
  std::vector<int32_t> handles;
  if (step.target.torch == TorchVersion::k1_13) {
    for (int i = 0; i < step.nested_steps; ++i) {
      const int32_t placeholder = sink.alloc(4, Category::kTemporary, true, -1);
      handles.push_back(sink.alloc(kRecordFunctionHandleBytes, Category::kTemporary, true, -1));
      sink.release(placeholder);
    }
  }
  // Optimizer.step runs _init_group and the update group by group (param_groups order).
  std::vector<StepParam> params = step.params;
  std::stable_sort(params.begin(), params.end(),
                   [](const StepParam& a, const StepParam& b) { return a.group < b.group; });
  bool maps_made = false;
  for (size_t first = 0; first < params.size();) {
    size_t end = first;
    while (end < params.size() && params[end].group == params[first].group) ++end;
    const auto group = std::span<const StepParam>(params).subspan(first, end - first);
    if (is_bitsandbytes(step.optimizer.kind)) {
      step_group_bitsandbytes(step, group, sink, maps_made);
    } else {
      step_group(step, group, sink);
    }
    first = end;
  }
  for (auto h = handles.rbegin(); h != handles.rend(); ++h) sink.release(*h);
  for (int32_t b : unscale) sink.release(b);
}

}  // namespace trainfit
