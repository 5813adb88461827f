// trainfit gpus: the GPU catalog.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "base/units.h"
#include "cli/cli.h"
#include "estimate/gpu_catalog.h"

namespace trainfit {

CommandRun setup_gpus(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "print one JSON object");
  app.footer(
      "Memory is the total nvidia-smi reports. Peaks are the datasheets' dense figures in "
      "TFLOP/s: FP32 on CUDA cores, TF32 tensor math, FP16/BF16 tensor math with FP32 "
      "accumulation (what autocast's GEMMs run; half rate on GeForce cards); bandwidth in GB/s. "
      "A card not listed: --gpu-memory 24GiB.");
  return [json](std::ostream& out, std::ostream&) {
    if (*json) {
      nlohmann::json gpus = nlohmann::json::array();
      for (const GpuSpec& g : gpu_catalog()) {
        gpus.push_back({{"name", g.name},
                        {"display", g.display},
                        {"total_bytes", g.total_bytes},
                        {"sm", g.sm},
                        {"cublas_workspace_bytes", cublas_workspace_bytes(g.sm)},
                        {"sm_count", g.peaks.sm_count},
                        {"boost_clock_mhz", g.peaks.boost_mhz},
                        {"fp32_flops", g.peaks.fp32_tflops * 1e12},
                        {"tf32_flops", g.peaks.tf32_tflops * 1e12},
                        {"fp16_flops", g.peaks.fp16_tflops * 1e12},
                        {"memory_bandwidth_bytes_per_s", g.peaks.bandwidth_gbps * 1e9},
                        {"l2_bytes", g.peaks.l2_bytes}});
      }
      out << nlohmann::json{{"gpus", gpus}}.dump(2) << '\n';
      return kExitOk;
    }
    constexpr std::string_view kRow =
        "{:<11} {:<30} {:>10} {:>5} {:>4} {:>6} {:>6} {:>9} {:>6} {:>8} {:>9}\n";
    out << fmt::format(kRow, "name", "GPU", "memory", "arch", "SMs", "FP32", "TF32", "FP16/BF16",
                       "GB/s", "L2", "cuBLAS ws");
    for (const GpuSpec& g : gpu_catalog()) {
      const GpuPeaks& p = g.peaks;
      out << fmt::format(kRow, g.name, g.display, format_bytes(g.total_bytes),
                         fmt::format("sm{}", g.sm), p.sm_count,
                         fmt::format("{:.1f}", p.fp32_tflops),
                         p.tf32_tflops > 0 ? fmt::format("{:.1f}", p.tf32_tflops) : "-",
                         fmt::format("{:.1f}", p.fp16_tflops), p.bandwidth_gbps,
                         format_bytes(p.l2_bytes), format_bytes(cublas_workspace_bytes(g.sm)));
    }
    return kExitOk;
  };
}

}  // namespace trainfit
