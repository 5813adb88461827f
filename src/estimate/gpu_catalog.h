// GPUs trainfit knows: memory, architecture (which decides cuBLAS workspace sizes and the
// attention kernels), the datasheet peaks a step-time model needs, and an estimate of the CUDA
// context.
//
//   Result<GpuSpec> gpu = find_gpu("rtx4090");
//   gpu->total_bytes, gpu->sm, cublas_workspace_bytes(gpu->sm)
//   gpu->peaks.fp16_tflops   // 165.2: dense FP16/BF16 tensor math with FP32 accumulation
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "graph/device_rules.h"

namespace trainfit {

// Datasheet figures (dense, no 2:4 sparsity), at the boost clock the datasheet quotes.
struct GpuPeaks {
  int sm_count = 0;           // streaming multiprocessors
  int fp32_lanes_per_sm = 0;  // FP32 FMA units per SM: 64 (V100, T4, A100) or 128
  int boost_mhz = 0;          // the clock of the FP32 figure
  double fp32_tflops = 0;     // FP32 on CUDA cores
  double tf32_tflops = 0;     // TF32 tensor math; 0 where there is none (before sm80)
  double fp16_tflops = 0;     // FP16 (and BF16 from sm80) tensor math, FP32 accumulate: what
                              // autocast's GEMMs run; half the FP16-accumulate rate on GeForce
  double bandwidth_gbps = 0;  // memory bandwidth, GB/s (10^9 bytes)
  int64_t l2_bytes = 0;       // L2 cache
};

// What a card achieves of its peaks, where public measurements say; the defaults elsewhere.
struct GpuEfficiency {
  double fp32_gemm = 0.85;    // of the FP32 peak, large FP32 GEMMs
  double tensor_gemm = 0.80;  // of the tensor peaks (TF32, FP16/BF16), large GEMMs
  double bandwidth = 0.80;    // of the datasheet bandwidth, large elementwise kernels
  // A convolution gathering its im2col without shared memory (too few input channels for
  // cuDNN's 16-byte loads: cuDNN runs `*_indexed_wo_smem` kernels) reads it through the SMs'
  // caches: this fraction of a nominal 128 bytes a clock per SM, so it scales with the SMs and
  // their clock, not with DRAM. The H100's calibration timed the 7x7 convolution of 3
  // channels at batch 64 on 224x224: 407 us in TF32 (472 MB of im2col beside its own tensors:
  // 0.045 of 132 SMs at 1980 MHz) and 165 us in fp16 (236 MB: 0.060); their mean puts each
  // within 11%.
  double im2col_gather = 0.052;
};

struct GpuSpec {
  std::string_view name;     // what --gpu takes
  std::string_view display;  // what nvidia-smi calls it
  int64_t total_bytes = 0;   // total memory as nvidia-smi reports it
  int sm = 80;               // compute capability, e.g. 89 for 8.9
  GpuPeaks peaks;
  GpuEfficiency efficiency;
  // Device used minus peak reserved, measured on this card (PyTorch 2.11, CUDA 13.0 with lazy
  // module loading, cuDNN 9.19): the CUDA context, the loaded kernels and the cuBLAS and cuDNN
  // handles. 0: never measured, kDefaultCudaContextBytes stands in.
  int64_t measured_context_bytes = 0;
};

const std::vector<GpuSpec>& gpu_catalog();
Result<GpuSpec> find_gpu(std::string_view name);

// Memory the CUDA context, loaded kernels and library handles take outside PyTorch's allocator,
// on a card where it was never measured: an estimate (300-400 MB of context with lazy loading,
// pytorch/pytorch#107667 and #109888, plus cuBLAS and cuDNN handles); --cuda-context overrides
// it. On the H100 the same amount measured 767 to 771 MiB (GpuSpec::measured_context_bytes).
inline constexpr int64_t kDefaultCudaContextBytes = int64_t{500} << 20;

}  // namespace trainfit
