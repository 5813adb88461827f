#include "estimate/gpu_catalog.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <string>

namespace trainfit {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

}  // namespace

// Efficiencies: {FP32 GEMM, tensor GEMM, bandwidth} as fractions of the peaks, where public
// measurements give them (the rest keep GpuEfficiency's defaults):
// - FP32 GEMM: nn.Linear over 1,040 shapes per GPU in NeuSight's data/dataset/test/linear.csv
//   (PyTorch 2.1), the fraction of FP32 peak fitted per card: V100 0.94, A100 80GB 0.86, A100
//   40GB 0.78, H100 0.72, T4 0.48, L4 0.28 (the 70-72 W cards throttle).
// - Tensor GEMM: the maximum achievable matmul FLOPS of large BF16 GEMMs (stas00/ml-engineering,
//   compute/accelerator/README.md): A100 SXM 86.9%, H100 SXM 80.3% (H200 the same); L4 FP16 with
//   FP32 accumulate 87 TFLOPS, 72% (NVIDIA developer forum).
// - Bandwidth: large elementwise kernels in NeuSight's per-kernel data: V100 91%, A100 86%,
//   L4 78%, T4 74% of datasheet.
// Peaks: {SMs, FP32 lanes per SM, boost MHz, FP32, TF32, FP16/BF16 with FP32 accumulate (TFLOP/s),
// bandwidth GB/s, L2}. FP32 = 2 x SMs x lanes x clock, which the catalog test checks.
const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> kGpus = {
      // GA106. NVIDIA's RTX 3060 specifications (12.7 FP32, 360 GB/s); tensor figures from the
      // GA10x rate of the Ampere GA102 whitepaper (GeForce: FP32 accumulate at half rate).
      {"rtx3060",
       "NVIDIA GeForce RTX 3060 12GB",
       12288 * kMiB,
       86,
       {28, 128, 1777, 12.7, 12.7, 25.5, 360, 3 * kMiB}},
      // GA102. Ampere GA102 whitepaper, appendix table (RTX 3090).
      {"rtx3090",
       "NVIDIA GeForce RTX 3090",
       24576 * kMiB,
       86,
       {82, 128, 1695, 35.6, 35.6, 71.0, 936, 6 * kMiB}},
      // AD102. Ada Lovelace whitepaper, appendix A (RTX 4090).
      {"rtx4090",
       "NVIDIA GeForce RTX 4090",
       24564 * kMiB,
       89,
       {128, 128, 2520, 82.6, 82.6, 165.2, 1008, 72 * kMiB}},
      // GB202. NVIDIA's RTX 5090 specifications (104.8 FP32, 1792 GB/s); tensor figures from
      // the GeForce Blackwell rate (838 sparse FP16-accumulate TFLOPS / 4).
      {"rtx5090",
       "NVIDIA GeForce RTX 5090",
       32607 * kMiB,
       120,
       {170, 128, 2407, 104.8, 104.8, 209.5, 1792, 96 * kMiB}},
      // TU104. Tesla T4 datasheet (8.1 FP32, 65 FP16 mixed precision, 320 GB/s); no TF32, no BF16.
      {"t4",
       "Tesla T4",
       15360 * kMiB,
       75,
       {40, 64, 1590, 8.1, 0, 65.0, 320, 4 * kMiB},
       {0.48, 0.80, 0.74}},
      // GA102. NVIDIA A10 datasheet (31.2 FP32, 62.5 TF32, 125 BF16/FP16, 600 GB/s).
      {"a10", "NVIDIA A10", 23028 * kMiB, 86, {72, 128, 1695, 31.2, 62.5, 125.0, 600, 6 * kMiB}},
      // AD104. NVIDIA L4 datasheet (30.3 FP32, 60 TF32, 121 BF16/FP16, 300 GB/s).
      {"l4",
       "NVIDIA L4",
       23034 * kMiB,
       89,
       {58, 128, 2040, 30.3, 60.0, 121.0, 300, 48 * kMiB},
       {0.28, 0.72, 0.78}},
      // GV100, SXM2. Volta whitepaper table (15.7 FP32, 125 tensor, 900 GB/s); no TF32, no BF16.
      {"v100-16gb",
       "Tesla V100 16GB",
       16384 * kMiB,
       70,
       {80, 64, 1530, 15.7, 0, 125.0, 900, 6 * kMiB},
       {0.94, 0.80, 0.91}},
      {"v100-32gb",
       "Tesla V100 32GB",
       32768 * kMiB,
       70,
       {80, 64, 1530, 15.7, 0, 125.0, 900, 6 * kMiB},
       {0.94, 0.80, 0.91}},
      // GA100, SXM. A100 datasheet (19.5 FP32, 156 TF32, 312 BF16/FP16; 1555 GB/s for 40GB,
      // 2039 GB/s for 80GB).
      {"a100-40gb",
       "NVIDIA A100 40GB",
       40960 * kMiB,
       80,
       {108, 64, 1410, 19.5, 156.0, 312.0, 1555, 40 * kMiB},
       {0.78, 0.869, 0.86}},
      {"a100-80gb",
       "NVIDIA A100 80GB",
       81920 * kMiB,
       80,
       {108, 64, 1410, 19.5, 156.0, 312.0, 2039, 40 * kMiB},
       {0.86, 0.869, 0.86}},
      // GH100, SXM5. H100 datasheet (67 FP32, 494.7 TF32, 989.4 BF16/FP16, 3350 GB/s); the
      // tensor figures are at 1830 MHz, FP32 at 1980 MHz.
      {"h100-80gb",
       "NVIDIA H100 80GB HBM3",
       81559 * kMiB,
       90,
       {132, 128, 1980, 67.0, 494.7, 989.4, 3350, 50 * kMiB},
       {0.72, 0.803, 0.80},
       // validation/gpu_results/NVIDIA_H100_80GB_HBM3/more_cases.json: 804,061,184 and
       // 808,255,488 bytes over four models; the larger, so device used is not low.
       808'255'488},
      // H200 datasheet: H100 SXM's compute with 4800 GB/s of HBM3e.
      {"h200",
       "NVIDIA H200 141GB",
       143771 * kMiB,
       90,
       {132, 128, 1980, 67.0, 494.7, 989.4, 4800, 50 * kMiB},
       {0.72, 0.803, 0.80}},
  };
  return kGpus;
}

Result<GpuSpec> find_gpu(std::string_view name) {
  std::string names;
  for (const GpuSpec& g : gpu_catalog()) {
    if (g.name == name) return g;
    names += names.empty() ? "" : ", ";
    names += g.name;
  }
  return not_found(fmt::format("unknown GPU '{}'", name),
                   fmt::format("known GPUs: {}; or give --gpu-memory 24GiB", names));
}

}  // namespace trainfit
