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
// The host dispatches every op eagerly and the GPU runs each kernel once it is launched and the
// kernels before it are done: two clocks, kernel by kernel. Where the host falls behind, the
// GPU's queue runs dry and waits; a read of a GPU value (.item()) makes the host wait for the
// queue to drain. The step ends when both are done (the measurement synchronises).
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
  int sm = 80;                      // compute capability: how many blocks an SM holds
  // A product writes its output after its main loop, not overlapped with the math (Note [A
  // product's epilogue] in step_time.cc): Hopper's, and where a calibration shows it.
  bool serial_epilogue = false;
  // Host side, per eager op: Python and the dispatcher with autograd recording, the autograd
  // engine per backward node, and cudaLaunchKernel per kernel. The op and the node are the H100
  // calibration's (PyTorch 2.11 on that card's host: 10.1 us an op and 17.2 us a node with
  // their launch, less the launch; validation/host_costs.py checks them). PyTorch 1.x's figures,
  // 5 and 2 us (about 7 us an op with its launch, pytorch/pytorch#41383), left ACT's step on
  // the H100, where the host sets the pace, 15% short.
  double python_op_s = 8.1e-6;
  double autograd_node_s = 15.2e-6;
  double launch_s = 2e-6;
  // Host work that is not an op from Python, from the PyTorch profiles of two LeRobot steps on
  // the H100 (gpu-truth snapshots.tar.xz, T_act-seed000-b8.txt and T_diffusion-default-b64.txt):
  // a tensor C++ makes without a kernel (aten::select's CPU total per call, 25.2 ms over
  // 10,113 in ACT's), a gradient the engine hands on beyond a node's first (StackBackward0's
  // self time per gradient, 15.8 ms over 6 x 842), a parameter in one of the optimizer's
  // Python loops (zero_grad's self time per parameter, 7.0 ms over 3 x (153 + 212)), and a
  // cuDNN convolution's own host work, finding its plan and packing its arguments
  // (aten::cudnn_convolution's self time per call in ACT's, 9.5 ms over 189; its backward's,
  // 17.7 ms over 189 calls of two convolutions each, is the same 47 us a call), and a read of a
  // GPU scalar with .item(): its dispatch, copy and wait on a drained queue
  // (aten::_local_scalar_dense's CPU total per call over both, 43.2 ms over 2,193).
  double view_s = 2.5e-6;
  double grad_edge_s = 3.1e-6;
  double param_loop_s = 6.4e-6;
  double cudnn_call_s = 50e-6;
  double sync_s = 19.7e-6;
  // A Python call into torch under a TorchFunctionMode (torch.set_default_device's) costs this
  // much more than the call itself (validation/function_mode_overhead.py: a chain of
  // multiplies with and without such a mode, the calibration's host-op chain).
  double mode_call_share = 0.83;
  // An nn.Module call (Module.__call__ and its forward's Python frame) costs this share of a
  // call into torch (validation/host_costs.py: a chain of multiplies, each inside a module's
  // forward and without one, on this machine's torch).
  double module_call_share = 0.37;
  Link link = link_of(LinkKind::kPcie4);  // between the GPUs of a node (--link, --bus-bandwidth)
};

// The catalog's constants for a card.
GpuTiming catalog_timing(const GpuSpec& gpu);

// Where a step's time goes: the GPU computing (kernels bound by their math), moving memory
// (kernels bound by bandwidth), the fixed cost of each kernel, and waiting for the host.
enum class TimeShare : uint8_t { kMath, kMemory, kLaunch, kHost };
inline constexpr size_t kTimeShareCount = 4;
inline constexpr auto kTimeShareNames = enum_names<TimeShare>({
    {TimeShare::kMath, "gpu_math"},
    {TimeShare::kMemory, "memory_traffic"},
    {TimeShare::kLaunch, "kernel_overhead"},
    {TimeShare::kHost, "host_wait"},
});

struct StepTime {
  double step_s = 0;                              // one optimizer step (all its micro-batches)
  std::array<double, kStepPartCount> part_s{};    // of the step's wall time, per part
  std::array<double, kStepPartCount> gpu_s{};     // the GPU busy
  std::array<double, kStepPartCount> cpu_s{};     // the host busy
  double cpu_bound_s = 0;                         // of step_s: the GPU idle, waiting for the host
  std::array<double, kTimeShareCount> share_s{};  // step_s split by TimeShare (sums to it)
  double gpu_only_s = 0;  // the kernels back to back: the step if the host never held them up
  double syncs = 0;       // device-to-host reads the host waits for, per step
  int64_t samples = 0;    // per optimizer step
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
  double share(TimeShare s) const { return share_s[static_cast<size_t>(s)]; }
  double cpu_bound_share() const { return step_s > 0 ? cpu_bound_s / step_s : 0; }
  TimeShare dominant() const;
};

StepTime time_step(const StepCost& cost, const GpuTiming& gpu);

// Adds a data-parallel run's communication to a step: step_s, samples_per_s and
// achieved_flops_per_s then include it.
void add_communication(StepTime& t, CommTime comm);

// Seconds of one kernel on the GPU (all `k.launches` of it), overheads included; 0 for host
// work alone.
double kernel_seconds(const KernelCost& k, const GpuTiming& gpu);

// Seconds of the host's work for one kernel (each repeat).
double host_seconds(const CpuWork& w, StepPart part, const GpuTiming& gpu);

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
