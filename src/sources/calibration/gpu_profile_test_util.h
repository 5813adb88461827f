// A GPU profile for tests, made by the step-time model itself with chosen constants: the
// timings of the shapes trainfit.calibrate measures, and the JSON it would write.
//
//   GpuProfile p = synthetic_a100_profile();      // fit_gpu_profile finds chosen_a100_timing()
//   std::string text = to_json(p).dump();
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "sources/calibration/gpu_profile.h"

namespace trainfit {

// Timings of the shapes trainfit.calibrate measures, made by the model itself on the A100 with
// chosen constants (not a measurement): the fit must find those constants again.
inline GpuTiming chosen_a100_timing() {
  GpuTiming t = catalog_timing(*find_gpu("a100-80gb"));
  t.efficiency = {.fp32_gemm = 0.71, .tensor_gemm = 0.58, .bandwidth = 0.87};
  t.kernel_overhead_s = 3e-6;
  return t;
}

inline GpuProfile synthetic_a100_profile() {
  GpuProfile p;
  p.source = "synthetic.json";
  p.device_name = "NVIDIA A100-SXM4-80GB";
  p.sm_count = 108;
  p.compute_capability = 80;
  p.total_bytes = int64_t{80} << 30;
  const int64_t shapes[][3] = {{256, 256, 256},     {512, 512, 512},    {1024, 1024, 1024},
                               {2048, 2048, 2048},  {4096, 4096, 4096}, {8192, 8192, 8192},
                               {128, 4096, 4096},   {4096, 4096, 128},  {16384, 1024, 4096},
                               {16384, 4096, 1024}, {32768, 768, 768},  {8192, 3072, 768}};
  for (MathPath math : {MathPath::kFp32, MathPath::kTf32, MathPath::kFp16, MathPath::kBf16}) {
    for (const auto& s : shapes) p.gemms.push_back({math, s[0], s[1], s[2], 0});
  }
  for (MathPath math : {MathPath::kTf32, MathPath::kFp16}) {
    p.convs.push_back({math, 64, 3, 224, 224, 64, 7, 2, 3, 0});
    p.convs.push_back({math, 64, 64, 56, 56, 64, 3, 1, 1, 0});
    p.convs.push_back({math, 64, 256, 56, 56, 64, 1, 1, 0, 0});
  }
  for (int64_t bytes : {int64_t{1} << 21, int64_t{1} << 25, int64_t{1} << 29, int64_t{1} << 31}) {
    p.copies.push_back({bytes, 0});
  }
  p.empty_kernel_s = 3e-6;
  p.host_op_s = 9e-6;
  p.autograd_node_s = 6e-6;
  p.view_s = 1.5e-6;
  p.sync_s = 30e-6;
  p.mode_call_share = 1.2;
  p.module_call_share = 0.4;
  // The timings the chosen constants give.
  const GpuTiming t = chosen_a100_timing();
  const std::vector<TimedKernel> kernels = profile_kernels(p);
  size_t i = 0;
  for (GemmTiming& g : p.gemms) g.seconds = kernel_seconds(kernels[i++].kernel, t);
  for (ConvTiming& c : p.convs) c.seconds = kernel_seconds(kernels[i++].kernel, t);
  for (CopyTiming& c : p.copies) c.seconds = kernel_seconds(kernels[i++].kernel, t);
  return p;
}

// The profile as trainfit.calibrate writes it.
inline nlohmann::json to_json(const GpuProfile& p) {
  nlohmann::json j{{"format", kGpuProfileFormat},
                   {"version", kGpuProfileVersion},
                   {"device",
                    {{"name", p.device_name},
                     {"sm_count", p.sm_count},
                     {"compute_capability", {p.compute_capability / 10, p.compute_capability % 10}},
                     {"total_bytes", p.total_bytes}}},
                   {"torch", "2.5.1"},
                   {"cuda", "12.4"},
                   {"empty_kernel_s", p.empty_kernel_s},
                   {"host_op_s", p.host_op_s},
                   {"autograd_node_s", p.autograd_node_s}};
  const std::pair<const char*, std::optional<double>> host[] = {
      {"view_s", p.view_s},
      {"grad_edge_s", p.grad_edge_s},
      {"param_loop_s", p.param_loop_s},
      {"mode_call_share", p.mode_call_share},
      {"module_call_share", p.module_call_share},
      {"sync_s", p.sync_s},
      {"cudnn_call_s", p.cudnn_call_s}};
  for (const auto& [key, value] : host) {
    if (value) j["host"][key] = *value;
  }
  for (const GemmTiming& g : p.gemms) {
    j["gemm"].push_back({{"math", kMathPathNames.name(g.math)},
                         {"m", g.m},
                         {"n", g.n},
                         {"k", g.k},
                         {"seconds", g.seconds}});
  }
  j["conv"] = nlohmann::json::array();
  for (const ConvTiming& c : p.convs) {
    j["conv"].push_back({{"math", kMathPathNames.name(c.math)},
                         {"n", c.n},
                         {"c", c.c},
                         {"h", c.h},
                         {"w", c.w},
                         {"out_channels", c.out_channels},
                         {"kernel", c.kernel},
                         {"stride", c.stride},
                         {"padding", c.padding},
                         {"seconds", c.seconds}});
  }
  for (const CopyTiming& c : p.copies) {
    j["copy"].push_back({{"bytes", c.bytes}, {"seconds", c.seconds}});
  }
  return j;
}

}  // namespace trainfit
