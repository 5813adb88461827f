// The device an estimate is for: the kernel target (PyTorch 2.x on CUDA, or 1.13 on CPU), the
// GPU and its memory, the CUDA context, and the cuBLAS workspace its architecture takes.
//
//   DeviceProfile d = cuda_profile(*find_gpu("rtx4090"));   // 24 GiB, sm89, 8.1 MiB cuBLAS
//   DeviceProfile open = cuda_profile(std::nullopt);        // memory unknown, Ampere assumed
//   DeviceProfile cpu = cpu_profile();                      // exact tensor bytes, no cache
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "estimate/gpu_catalog.h"
#include "estimate/step_time.h"
#include "graph/graph.h"

namespace trainfit {

// Where the step-time constants came from when a calibration run on the card gave them
// (--gpu-profile; sources/calibration fits them).
struct TimingCalibration {
  std::string file;         // the profile as given
  std::string measured_on;  // the device it names
  int kernels = 0;          // timings the constants were fitted to
  int host_bound = 0;       // timings left out: shorter than the host takes to issue them
  double median_error = 0;  // |predicted / measured - 1| over them, with the fitted constants
  std::optional<double> catalog_median_error;  // the same with the catalog's (a catalog card)
};

// Where the CUDA context's bytes come from: the card's measurement, an estimate, the user.
enum class ContextSource : uint8_t { kEstimated, kMeasured, kGiven };
inline constexpr auto kContextSourceNames = enum_names<ContextSource>({
    {ContextSource::kEstimated, "estimated"},
    {ContextSource::kMeasured, "measured"},
    {ContextSource::kGiven, "given"},
});

struct DeviceProfile {
  KernelTarget target;
  std::string gpu;  // catalog name; empty when no GPU was given
  std::string gpu_display;
  int64_t total_bytes = -1;  // device memory; -1: unknown
  int sm = 80;               // architecture assumed when no GPU was given: Ampere
  int64_t context_bytes = 0;
  ContextSource context_source = ContextSource::kEstimated;
  int64_t cublas_workspace_bytes = 0;
  bool caching_allocator = true;
  // The GPU's step-time constants: the catalog's, or a calibration profile's. nullopt when no
  // GPU was named, so that there is no step time.
  std::optional<GpuTiming> timing;
  std::optional<TimingCalibration> calibration;  // with `timing` from a GPU profile
};

DeviceProfile cpu_profile();
// A CUDA device: `gpu` from the catalog, or none (Ampere assumptions, memory unknown).
DeviceProfile cuda_profile(const std::optional<GpuSpec>& gpu);

}  // namespace trainfit
