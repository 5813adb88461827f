// How a model trains: the optimizer and its implementation, gradient accumulation, activation
// checkpointing, and over how many GPUs.
//
//   TrainingConfig cfg;
//   cfg.optimizer.kind = OptimizerKind::kAdamW;
//   cfg.checkpoint = {"encoder.layers.*"};
//   optimizer_name(cfg.optimizer.kind) == "adamw"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"

namespace trainfit {

// kAdam8bit / kAdamW8bit: bitsandbytes' Adam8bit / AdamW8bit (blockwise 8-bit state).
// kPagedAdamW / kPagedAdamW8bit: bitsandbytes' PagedAdamW (32-bit state) / PagedAdamW8bit, whose
// state of large parameters lives in CUDA unified memory, outside PyTorch's allocator.
enum class OptimizerKind : uint8_t {
  kSgd,
  kMomentum,
  kAdam,
  kAdamW,
  kAdam8bit,
  kAdamW8bit,
  kPagedAdamW,
  kPagedAdamW8bit
};
// kDefault: what PyTorch picks: foreach for CUDA tensors on 2.x, the for-loop otherwise.
enum class OptimizerImpl : uint8_t { kDefault, kForeach, kFused, kLoop };

inline constexpr auto kOptimizerNames = enum_names<OptimizerKind>({
    {OptimizerKind::kSgd, "sgd"},
    {OptimizerKind::kMomentum, "momentum"},
    {OptimizerKind::kAdam, "adam"},
    {OptimizerKind::kAdamW, "adamw"},
    {OptimizerKind::kAdam8bit, "adam8bit"},
    {OptimizerKind::kAdamW8bit, "adamw8bit"},
    {OptimizerKind::kPagedAdamW, "paged_adamw"},
    {OptimizerKind::kPagedAdamW8bit, "paged_adamw8bit"},
});
inline constexpr auto kOptimizerImplNames = enum_names<OptimizerImpl>({
    {OptimizerImpl::kDefault, "default"},
    {OptimizerImpl::kForeach, "foreach"},
    {OptimizerImpl::kFused, "fused"},
    {OptimizerImpl::kLoop, "loop"},
});
inline std::string_view optimizer_name(OptimizerKind kind) {
  return kOptimizerNames.name(kind);
}
inline std::string_view optimizer_impl_name(OptimizerImpl impl) {
  return kOptimizerImplNames.name(impl);
}

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  OptimizerImpl impl = OptimizerImpl::kDefault;
  // Negative: the torch default (0 for SGD and Adam, 0.01 for AdamW).
  double weight_decay = -1;
  std::string preset;  // the model's own recipe this follows ("LeRobot's ACT preset: ..."), if any
  // Adam's step counters on the GPU although neither fused nor capturable: Adam._init_group
  // makes them with torch.tensor(0.0), which torch.set_default_device("cuda") puts there. The
  // foreach and for-loop steps then read each back with .item(), a synchronisation each.
  bool step_on_device = false;
  // torch.set_default_device is in force: its DeviceContext mode intercepts every Python call
  // into torch (the forward's ops, the optimizer's), which costs host time on each.
  bool default_device_mode = false;

  // The weight decay the optimizer applies: the given one, or torch's default.
  double effective_weight_decay() const {
    if (weight_decay >= 0) return weight_decay;
    return kind == OptimizerKind::kAdamW ? 0.01 : 0.0;
  }
  bool operator==(const OptimizerConfig&) const = default;
};

// How the step is spread over GPUs. Every memory figure is one rank's (rank 0's).
enum class Strategy : uint8_t { kSingle, kDdp, kFsdp, kZero1, kZero2, kZero3 };
inline constexpr auto kStrategyNames = enum_names<Strategy>({
    {Strategy::kSingle, "none"},
    {Strategy::kDdp, "ddp"},
    {Strategy::kFsdp, "fsdp"},
    {Strategy::kZero1, "zero1"},
    {Strategy::kZero2, "zero2"},
    {Strategy::kZero3, "zero3"},
});
inline std::string_view strategy_name(Strategy s) {
  return kStrategyNames.name(s);
}

// DistributedDataParallel's constructor arguments that change memory.
struct DdpConfig {
  std::optional<int64_t> bucket_cap_bytes;  // bucket_cap_mb; nullopt: DDP's 25 MiB
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  bool operator==(const DdpConfig&) const = default;
};

// How FullyShardedDataParallel shards: FULL_SHARD frees each unit's gathered parameters after
// its forward and gathers them again for its backward; SHARD_GRAD_OP keeps them from forward
// to the end of the unit's backward.
enum class FsdpSharding : uint8_t { kFullShard, kShardGradOp };
inline constexpr auto kFsdpShardingNames = enum_names<FsdpSharding>({
    {FsdpSharding::kFullShard, "full_shard"},
    {FsdpSharding::kShardGradOp, "shard_grad_op"},
});

// FullyShardedDataParallel's arguments that change memory (torch 1.13's defaults otherwise:
// no prefetch, no CPU offload).
struct FsdpConfig {
  // Module-path patterns (as --checkpoint's) of the modules wrapped as their own units; the
  // rest of the model is the root unit. Empty: FSDP without an auto_wrap_policy, one unit.
  std::vector<std::string> wrap;
  FsdpSharding sharding = FsdpSharding::kFullShard;
  // MixedPrecision(param_dtype=reduce_dtype=buffer_dtype=bfloat16) on an fp32 model: the
  // shards, their gradients and the optimizer stay fp32; parameters are gathered, and the
  // model computes and its gradients are reduced, in bf16 (the graph is built in bf16).
  bool mixed_precision_bf16 = false;
  bool operator==(const FsdpConfig&) const = default;
};

// Default bandwidth between nodes: one 100 Gbit/s NIC per node, in GB/s.
inline constexpr double kDefaultNetworkGbits = 100;

struct DistributedConfig {
  int world_size = 1;  // GPUs per node x nodes
  int nodes = 1;
  double network_gbps = kDefaultNetworkGbits / 8;  // between nodes, per node, GB/s
  Strategy strategy = Strategy::kSingle;
  DdpConfig ddp;
  FsdpConfig fsdp;
  bool operator==(const DistributedConfig&) const = default;
};

// What the training loop keeps of a step. kHeld: `for x, y in loader: out = model(x); loss =
// ...`, whose locals hold the batch, the model's output and the loss until the step ends (as
// validation/harness.py's loop). kScoped: a step function makes the batch and returns the
// loss, so the batch and the output go when the function returns after the loss, or later
// when autograd lets go of them.
enum class LoopStyle : uint8_t { kHeld, kScoped };
inline constexpr auto kLoopStyleNames = enum_names<LoopStyle>({
    {LoopStyle::kHeld, "held"},
    {LoopStyle::kScoped, "scoped"},
});

// How the training script runs its step, as switches the request carries to the lowering whole:
// a new one is a field here and a row of the option table (pipeline/request_options.cc).
struct StepSwitches {
  // torch.backends.cudnn.benchmark = True: the first iteration times every candidate cuDNN
  // plan of each convolution (device_rules.h, Note [cuDNN benchmark mode]).
  bool cudnn_benchmark = false;
  // optimizer.zero_grad(set_to_none=...): True (PyTorch 2.x's default) frees the gradients;
  // False zeroes them in place, so they stay allocated through the next forward and the next
  // backward adds into them.
  bool zero_grad_set_to_none = true;
  bool operator==(const StepSwitches&) const = default;
};

struct TrainingConfig {
  OptimizerConfig optimizer;
  int grad_accum = 1;  // micro-batches per optimizer step
  int iterations = 2;  // optimizer steps simulated (state appears at the first)
  // Module-path patterns run under activation checkpointing; `*` matches one path component
  // ("encoder.layers.*" checkpoints each layer). Non-reentrant (use_reentrant=False) unless
  // checkpoint_reentrant: torch.utils.checkpoint's reentrant CheckpointFunction, transformers'
  // default for gradient_checkpointing_enable().
  std::vector<std::string> checkpoint;
  bool checkpoint_reentrant = false;
  // Under fp16 autocast, the first steps torch.amp.GradScaler skips: at its initial scale
  // (2^16) the scaled gradients overflow, so step() unscales, finds inf, and leaves the
  // optimizer (and its state) untouched. How many depends on the model and data: 0, what a
  // run reaches once the scale has calibrated, unless a measurement says otherwise.
  int grad_scaler_skips = 0;
  // A trace's replay under --precision amp-fp16 on CUDA: torch.amp.GradScaler scales the loss
  // and unscales before the step. (A zoo graph says so by its precision.)
  bool trace_grad_scaler = false;
  StepSwitches switches;
  LoopStyle loop = LoopStyle::kHeld;
  DistributedConfig distributed;
  bool operator==(const TrainingConfig&) const = default;
};

}  // namespace trainfit
