// Step time: the cost model's kernels (lower/cost.h) on one GPU.
//
//   Result<StepCost> cost = step_cost(graph, training, {});
//   StepTime t = time_step(*cost, catalog_timing(*find_gpu("a100-80gb")));
//   t.step_s, t.samples_per_s, t.part_s[StepPart::kBackward] ...
//
// Each kernel takes max(compute, memory) plus a fixed overhead on the GPU:
// - compute: FLOPs over the peak of its math (FP32, TF32, FP16/BF16 with FP32 accumulate)
//   times the card's achieved fraction of that peak, and for products the share of the SMs
//   their 128 x 128 output tiles keep busy in the last wave (NVIDIA's Matrix Multiplication
//   Background guide, tile and wave quantization; a product with fewer tiles than SMs splits
//   its K dimension). The fixed overhead makes small products slow, as size-dependent
//   efficiency tables do (Calculon's A100 table: 0.6 of peak at 1 GFLOP, 0.9 at 16).
// - memory: bytes over the achieved fraction of the datasheet bandwidth.
// The host dispatches every op eagerly; a part of the step (forward, backward, recompute,
// optimizer) takes the longer of its GPU time and its CPU time, so that a small model at a
// small batch is CPU-bound as it is in eager PyTorch.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "estimate/collectives.h"
#include "estimate/gpu_catalog.h"
#include "lower/cost.h"

namespace trainfit {

// The step-time constants of a card: the catalog's peaks and efficiencies, the GPU-side cost
// of each kernel, and the host's eager overhead (a calibration run replaces them).
struct GpuTiming {
  GpuPeaks peaks;
  GpuEfficiency efficiency;
  double kernel_overhead_s = 2e-6;  // per kernel on the GPU: launch latency, ramp and tail
  // Host side, per eager op: Python and the dispatcher with autograd recording (about 7 us an
  // op with its launch, pytorch/pytorch#41383), the autograd engine per backward node, and
  // cudaLaunchKernel per kernel.
  double python_op_s = 5e-6;
  double autograd_node_s = 2e-6;
  double launch_s = 2e-6;
  Link link = link_of(LinkKind::kPcie4);  // between the GPUs of a node (--link, --bus-bandwidth)
};

// The catalog's constants for a card.
GpuTiming catalog_timing(const GpuSpec& gpu);

struct StepTime {
  double step_s = 0;                            // one optimizer step (all its micro-batches)
  std::array<double, kStepPartCount> part_s{};  // the longer of GPU and CPU, per part
  std::array<double, kStepPartCount> gpu_s{};
  std::array<double, kStepPartCount> cpu_s{};
  double cpu_bound_s = 0;  // of step_s: the parts where the CPU is the bound
  int64_t samples = 0;     // per optimizer step
  double samples_per_s = 0;
  double flops = 0;  // per step, all kernels
  double achieved_flops_per_s = 0;
  // Per Graph::params entry: when its gradient is ready, seconds into the last micro-batch's
  // backward (the first's share of the backward time); -1 without one.
  std::vector<double> grad_ready_s;
  double micro_backward_s = 0;  // one micro-batch's backward
  // Data-parallel runs: the collectives, whose added time step_s includes.
  std::optional<CommTime> comm;
  double compute_s = 0;  // step_s without communication

  double part(StepPart p) const { return part_s[static_cast<size_t>(p)]; }
  double cpu_bound_share() const { return step_s > 0 ? cpu_bound_s / step_s : 0; }
};

StepTime time_step(const StepCost& cost, const GpuTiming& gpu);

// Adds a data-parallel run's communication to a step: step_s, samples_per_s and
// achieved_flops_per_s then include it.
void add_communication(StepTime& t, CommTime comm);

// Seconds of one kernel on the GPU (one launch of `k.launches`), overheads included.
double kernel_seconds(const KernelCost& k, const GpuTiming& gpu);

// The fraction of the SMs a product's tiles keep busy, over all its waves.
double wave_efficiency(const GemmShape& gemm, int sm_count);

// DistributedSampler (torch/utils/data/distributed.py): each rank takes every N-th index of
// the (shuffled) dataset. Without drop_last the list is padded with its first indices to a
// multiple of N; with drop_last the tail that does not split evenly is dropped.
struct SamplerSplit {
  int64_t samples_per_rank = 0;
  int64_t padded_samples = 0;   // repeated samples each epoch (drop_last=False)
  int64_t dropped_samples = 0;  // samples no rank sees (drop_last=True)
};
SamplerSplit distributed_sampler_split(int64_t dataset_size, int world_size, bool drop_last);

// An epoch of `dataset_size` samples over `world_size` ranks (DistributedSampler's share
// each): whole optimizer steps, the last one counted as full.
struct EpochTime {
  int64_t steps = 0;
  double seconds = 0;
};
EpochTime epoch_time(const StepTime& step, int64_t dataset_size, int world_size = 1);

}  // namespace trainfit
