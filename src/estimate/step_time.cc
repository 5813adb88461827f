#include "estimate/step_time.h"

#include <algorithm>
#include <cmath>

#include "base/size_math.h"

namespace trainfit {
namespace {

constexpr int64_t kTile = 128;
// A product with fewer tiles than SMs splits K into pieces of at least this many.
constexpr int64_t kMinSplitK = 512;

// The peak (FLOP/s) a product's math runs at, and the achieved fraction of it.
struct Rate {
  double peak = 0;
  double efficiency = 0;
};

Rate rate_of(MathPath math, const GpuTiming& gpu) {
  const GpuPeaks& p = gpu.peaks;
  const GpuEfficiency& e = gpu.efficiency;
  const Rate fp32{p.fp32_tflops * 1e12, e.fp32_gemm};
  // Cards without TF32 (before sm80) have no BF16 tensor math either.
  const bool ampere = p.tf32_tflops > 0;
  switch (math) {
    case MathPath::kTf32:
      return ampere ? Rate{p.tf32_tflops * 1e12, e.tensor_gemm} : fp32;
    case MathPath::kFp16:
      return p.fp16_tflops > 0 ? Rate{p.fp16_tflops * 1e12, e.tensor_gemm} : fp32;
    case MathPath::kBf16:
      return ampere ? Rate{p.fp16_tflops * 1e12, e.tensor_gemm} : fp32;
    case MathPath::kFp32:
      break;
  }
  return fp32;
}

bool on_tensor_cores(MathPath math, const GpuTiming& gpu) {
  switch (math) {
    case MathPath::kFp16:
      return gpu.peaks.fp16_tflops > 0;
    case MathPath::kTf32:
    case MathPath::kBf16:
      return gpu.peaks.tf32_tflops > 0;
    case MathPath::kFp32:
      break;
  }
  return false;
}

}  // namespace

GpuTiming catalog_timing(const GpuSpec& gpu) {
  GpuTiming t;
  t.peaks = gpu.peaks;
  t.efficiency = gpu.efficiency;
  t.sm = gpu.sm;
  t.serial_epilogue = gpu.sm == 90;  // Note [A product's epilogue]
  t.link = link_of(default_link(gpu.name));
  return t;
}

double wave_efficiency(const GemmShape& g, int sm_count) {
  if (sm_count <= 0) return 1;
  const int64_t tiles = g.count * g.batch * ceil_div(g.m, kTile) * ceil_div(g.n, kTile);
  if (tiles <= 0) return 1;
  int64_t work = tiles;
  if (tiles < sm_count) {
    const int64_t split = std::clamp<int64_t>(g.k / kMinSplitK, 1, sm_count / tiles);
    work = tiles * split;
  }
  const int64_t waves = ceil_div(work, int64_t{sm_count});
  return static_cast<double>(work) / static_cast<double>(waves * sm_count);
}

namespace {

// The blocks of `threads` threads one SM holds at once (the CUDA C++ Programming Guide's
// technical specifications per compute capability: resident blocks and threads per SM).
int64_t resident_blocks_per_sm(int sm, int threads) {
  int blocks = 32;
  int max_threads = 2048;
  if (sm == 75) {
    blocks = 16;
    max_threads = 1024;
  } else if (sm == 86 || sm == 87) {
    blocks = 16;
    max_threads = 1536;
  } else if (sm == 89) {
    blocks = 24;
    max_threads = 1536;
  } else if (sm >= 120) {
    max_threads = 1536;
  }
  return std::max(1, std::min(blocks, max_threads / std::max(threads, 1)));
}

// Bytes a second the SMs' caches serve to a gather at most: a nominal 128 bytes a clock per
// SM. Without a clock (a card known only from its calibration) the bandwidth stands in, and the
// fitted efficiency absorbs the difference.
double gather_peak(const GpuPeaks& p) {
  constexpr double kBytesPerClock = 128;
  if (p.sm_count > 0 && p.boost_mhz > 0) return p.sm_count * (p.boost_mhz * 1e6) * kBytesPerClock;
  return p.bandwidth_gbps * 1e9;
}

// Note [A product's epilogue]
// A GEMM kernel (cuBLAS's, or cuDNN's implicit GEMM) computes each output tile in a main loop
// over K that streams its operand tiles through shared memory while the tensor cores work on
// the previous ones, then writes the tile in an epilogue. Where the epilogue is not overlapped
// with another tile's main loop, a product takes
//   max(math, reading its operands) + writing its output,
// not max(math, all its bytes): a product that is memory-bound is unchanged, one that is
// math-bound pays for its output besides. The cost per output element is a fixed number of K
// steps' math, so small-K products reach a lower share of the peak: on the H100, 2 bytes at
// 0.80 of 3.35 TB/s are the math of 330 K steps at 0.80 of 989 TFLOP/s, and fp16 efficiency
// K / (K + 330) of 0.80 is what the calibration's products show (0.53 at K = 768, 0.61 at 1,024,
// 0.68 at 2,048, 0.78 at 4,096; validation/gpu_results/NVIDIA_H100_80GB_HBM3/h100-profile.json).
// GpuTiming::serial_epilogue says where this holds: Hopper's kernels, as measured; a card's
// calibration decides for itself (fit_gpu_profile keeps whichever way times its kernels
// better). On other cards, unmeasured, the overlapped form stays: the public table's RTX 3090
// rows, already predicted slower than timm measured them, would only move further off (the
// write adds time).
double product_output_bytes(const KernelCost& k) {
  const double elements = static_cast<double>(k.gemm.count * k.gemm.batch) *
                          static_cast<double>(k.gemm.m) * static_cast<double>(k.gemm.n);
  return elements * static_cast<double>(math_element_bytes(k.math));
}

// One kernel's GPU time: its body (bound by math or by memory) and the fixed cost per launch.
struct KernelTime {
  double body = 0;
  double overhead = 0;
  bool math_bound = false;
  double seconds() const { return body + overhead; }
};

KernelTime kernel_time(const KernelCost& k, const GpuTiming& gpu) {
  if (k.launches <= 0) return {};
  if (k.tensor_core_layout && !on_tensor_cores(k.math, gpu)) return {};
  double compute = 0;
  if (k.flops > 0) {
    Rate r = rate_of(k.is_gemm ? k.math : MathPath::kFp32, gpu);
    if (k.is_gemm) r.efficiency *= wave_efficiency(k.gemm, gpu.peaks.sm_count);
    compute = k.flops / (r.peak * r.efficiency);
  }
  const double bandwidth = gpu.peaks.bandwidth_gbps * 1e9 * gpu.efficiency.bandwidth;
  double memory = k.bytes / bandwidth;
  // See Note [A product's epilogue]: the write of its output follows its main loop.
  double epilogue = 0;
  if (k.is_gemm && gpu.serial_epilogue) {
    epilogue = std::min(k.bytes, product_output_bytes(k)) / bandwidth;
    memory -= epilogue;
  }
  if (k.gathered_bytes > 0)
    memory += k.gathered_bytes / (gather_peak(gpu.peaks) * gpu.efficiency.im2col_gather);
  if (k.grid.blocks > 0 && gpu.peaks.sm_count > 0) {
    // Blocks that each move a few bytes: the GPU's minimum per wave of them, as for a kernel.
    const int64_t resident = gpu.peaks.sm_count * resident_blocks_per_sm(gpu.sm, k.grid.threads);
    const auto waves = static_cast<double>(ceil_div(k.grid.blocks, resident));
    memory = std::max(memory, waves * gpu.kernel_overhead_s);
  }
  return {std::max(compute, memory) + epilogue,
          static_cast<double>(k.launches) * gpu.kernel_overhead_s, compute > memory};
}

// The two clocks of an eager step: the host issuing work, the GPU running it.
class Timeline {
 public:
  Timeline(const GpuTiming& gpu, StepTime& t) : gpu_(gpu), t_(t) {}

  void run(const KernelCost& k) {
    const auto p = static_cast<size_t>(k.part);
    if (k.part != part_) close();
    part_ = k.part;
    const KernelTime kt = kernel_time(k, gpu_);
    const double h = host_seconds(k.host, k.part, gpu_);
    t_.cpu_s[p] += h;
    t_.gpu_s[p] += kt.seconds();
    t_.share_s[static_cast<size_t>(kt.math_bound ? TimeShare::kMath : TimeShare::kMemory)] +=
        kt.body;
    t_.share_s[static_cast<size_t>(TimeShare::kLaunch)] += kt.overhead;
    t_.flops += k.flops;
    // Reads the host waits for run one at a time: each after the queue ahead of it.
    const double waits = std::max(1.0, k.host.syncs);
    for (double i = 0; i < waits; ++i) {
      host_ += h / waits;
      if (kt.seconds() > 0) {
        if (host_ > device_) {
          idle_ += host_ - device_;
          device_ = host_;
        }
        device_ += kt.seconds() / waits;
      }
      if (k.host.syncs > 0) host_ = std::max(host_, device_);
    }
    t_.syncs += k.host.syncs;
  }

  // Ends the step: both clocks done.
  void finish() {
    close();
    if (host_ > device_) idle_ += host_ - device_;
    t_.step_s = end_;
    t_.cpu_bound_s = idle_;
    t_.share_s[static_cast<size_t>(TimeShare::kHost)] = idle_;
    t_.gpu_only_s = end_ - idle_;
  }

 private:
  // The part that ran last ends when both clocks have passed its work.
  void close() {
    const double end = std::max(host_, device_);
    t_.part_s[static_cast<size_t>(part_)] += end - end_;
    end_ = end;
  }

  const GpuTiming& gpu_;
  StepTime& t_;
  StepPart part_ = StepPart::kForward;
  double host_ = 0;
  double device_ = 0;
  double end_ = 0;
  double idle_ = 0;
};

}  // namespace

double kernel_seconds(const KernelCost& k, const GpuTiming& gpu) {
  return kernel_time(k, gpu).seconds();
}

double host_seconds(const CpuWork& w, StepPart part, const GpuTiming& gpu) {
  const double per_dispatch = part == StepPart::kBackward ? gpu.autograd_node_s : gpu.python_op_s;
  return w.dispatches * per_dispatch + w.launches * gpu.launch_s + w.views * gpu.view_s +
         w.edges * gpu.grad_edge_s + w.params * gpu.param_loop_s +
         w.cudnn_calls * gpu.cudnn_call_s + w.syncs * gpu.sync_s +
         (w.mode_calls * gpu.mode_call_share + w.module_calls * gpu.module_call_share) *
             gpu.python_op_s;
}

TimeShare StepTime::dominant() const {
  size_t best = 0;
  for (size_t i = 1; i < kTimeShareCount; ++i) {
    if (share_s[i] > share_s[best]) best = i;
  }
  return static_cast<TimeShare>(best);
}

StepTime time_step(const StepCost& cost, const GpuTiming& gpu) {
  StepTime t;
  Timeline line(gpu, t);
  const int micro = std::max(1, cost.micro_batches);
  for (int m = 0; m < micro; ++m) {
    for (const KernelCost& k : cost.kernels) {
      // A kernel repeated fewer times than there are micro-batches runs in the last ones.
      if (k.part != StepPart::kOptimizer && m >= micro - k.repeat) line.run(k);
    }
  }
  for (const KernelCost& k : cost.kernels) {
    if (k.part == StepPart::kOptimizer) line.run(k);
  }
  line.finish();
  t.samples = cost.samples;
  t.compute_s = t.step_s;
  if (t.step_s > 0) {
    t.samples_per_s = static_cast<double>(t.samples) / t.step_s;
    t.achieved_flops_per_s = t.flops / t.step_s;
  }
  // Gradient readiness: the GPU time of the first micro-batch's backward kernels up to each,
  // scaled to the part's time (the CPU may be the bound).
  std::vector<double> done(cost.kernels.size() + 1, 0);
  for (size_t i = 0; i < cost.kernels.size(); ++i) {
    const KernelCost& k = cost.kernels[i];
    done[i + 1] = done[i] + (k.part == StepPart::kBackward ? kernel_seconds(k, gpu) : 0);
  }
  const auto backward = static_cast<size_t>(StepPart::kBackward);
  t.micro_backward_s = t.part_s[backward] / micro;
  // The kernels after backward_end run interleaved: each op's share of the backward time is
  // its share of the ops' own kernels.
  const size_t end = std::min(cost.backward_end, cost.kernels.size());
  const double scale = done[end] > 0 ? t.micro_backward_s / done[end] : 0;
  for (const GradReady& r : cost.grad_ready) {
    const auto p = static_cast<size_t>(r.param);
    if (t.grad_ready_s.size() <= p) t.grad_ready_s.resize(p + 1, -1);
    t.grad_ready_s[p] = done[std::min(r.kernels, end)] * scale;
  }
  return t;
}

void add_communication(StepTime& t, CommTime comm) {
  t.step_s = t.compute_s + comm.added_s();
  t.comm = std::move(comm);
  if (t.step_s > 0) {
    t.samples_per_s = static_cast<double>(t.samples) / t.step_s;
    t.achieved_flops_per_s = t.flops / t.step_s;
  }
}

SamplerSplit distributed_sampler_split(int64_t dataset_size, int world_size, bool drop_last) {
  SamplerSplit s;
  if (dataset_size <= 0 || world_size < 1) return s;
  if (drop_last && dataset_size % world_size != 0) {
    // math.ceil((len - N) / N), which for len not a multiple of N is len // N.
    s.samples_per_rank = dataset_size / world_size;
    s.dropped_samples = dataset_size - s.samples_per_rank * world_size;
  } else {
    s.samples_per_rank = ceil_div(dataset_size, int64_t{world_size});
    s.padded_samples = s.samples_per_rank * world_size - dataset_size;
  }
  return s;
}

EpochTime epoch_time(const StepTime& step, int64_t dataset_size, int world_size) {
  EpochTime e;
  if (step.samples <= 0 || dataset_size <= 0) return e;
  e.steps = ceil_div(distributed_sampler_split(dataset_size, world_size, false).samples_per_rank,
                     step.samples);
  e.seconds = static_cast<double>(e.steps) * step.step_s;
  return e;
}

}  // namespace trainfit
