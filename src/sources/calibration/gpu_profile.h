// A GPU profile: what `python3 -m trainfit.calibrate` timed on one card (products, convolutions,
// copies, an empty kernel, eager ops), and the step-time constants fitted to those timings.
//
//   Result<GpuProfile> p = parse_gpu_profile(text, "gpu.json");   // the file's text
//   Result<CalibratedTiming> c = fit_gpu_profile(*p, find_gpu("a100-80gb").value());
//   c->timing (replaces catalog_timing), c->calibration.median_error
//
// The fit keeps the card's datasheet peaks (for a card not in the catalog, the best rates the
// profile measured) and chooses the achieved fractions (FP32 products, tensor-core products,
// bandwidth) that minimize the median error over the timings they govern; the kernel overhead
// is the empty kernel's time; the host's cost per op and per autograd node is what the eager
// chains measured, less the launch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "estimate/device.h"
#include "estimate/gpu_catalog.h"
#include "estimate/step_time.h"

namespace trainfit {

inline constexpr std::string_view kGpuProfileFormat = "trainfit-gpu-profile";
inline constexpr int kGpuProfileVersion = 1;

struct GemmTiming {
  MathPath math = MathPath::kFp32;
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
};

// A 2-D convolution in channels_last (no layout change), square kernel and input.
struct ConvTiming {
  MathPath math = MathPath::kTf32;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t out_channels = 0, kernel = 0, stride = 1, padding = 0;
  double seconds = 0;
};

struct CopyTiming {
  int64_t bytes = 0;  // read and written
  double seconds = 0;
};

struct GpuProfile {
  std::string source;  // the file, as given
  std::string device_name;
  int sm_count = 0;
  int compute_capability = 0;  // 90 for 9.0
  int64_t total_bytes = 0;
  std::vector<GemmTiming> gemms;
  std::vector<ConvTiming> convs;
  std::vector<CopyTiming> copies;
  double empty_kernel_s = 0;   // GPU time per kernel, queued back to back
  double host_op_s = 0;        // host time per eager op with autograd recording, launch included
  double autograd_node_s = 0;  // host time per backward node, launch included
  // The host's other work ("host": GpuTiming's constants of the same names), where measured.
  std::optional<double> view_s, grad_edge_s, param_loop_s, mode_call_share, module_call_share,
      sync_s, cudnn_call_s;
};

// The profile in `text`; `source` (the file, as given) names it in errors and command lines.
// The front ends read the file (cli/input_files.h, python/trainfit/api.py).
Result<GpuProfile> parse_gpu_profile(std::string_view text, std::string_view source);

// A timing as the cost model sees it: one kernel and the seconds it took.
struct TimedKernel {
  KernelCost kernel;
  double seconds = 0;
};
std::vector<TimedKernel> profile_kernels(const GpuProfile& profile);

// The median of |predicted / measured - 1| over `kernels` with `timing`.
double median_error(const std::vector<TimedKernel>& kernels, const GpuTiming& timing);

struct CalibratedTiming {
  GpuTiming timing;
  TimingCalibration calibration;
};
// `gpu`: the catalog card the profile was measured on (its SM count must match), or nullopt.
Result<CalibratedTiming> fit_gpu_profile(const GpuProfile& profile,
                                         const std::optional<GpuSpec>& gpu);

// The device with the profile's constants: a catalog card's (`device.gpu` set) or, without one,
// a card of the profile's memory and architecture.
Status apply_gpu_profile(const GpuProfile& profile, DeviceProfile& device);

}  // namespace trainfit
