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
  app.footer("Memory is the total nvidia-smi reports. A card not listed: --gpu-memory 24GiB.");
  return [json](std::ostream& out, std::ostream&) {
    if (*json) {
      nlohmann::json gpus = nlohmann::json::array();
      for (const GpuSpec& g : gpu_catalog()) {
        gpus.push_back({{"name", g.name},
                        {"display", g.display},
                        {"total_bytes", g.total_bytes},
                        {"sm", g.sm},
                        {"cublas_workspace_bytes", cublas_workspace_bytes(g.sm)}});
      }
      out << nlohmann::json{{"gpus", gpus}}.dump(2) << '\n';
      return kExitOk;
    }
    out << fmt::format("{:<11} {:<30} {:>10} {:>5} {:>16}\n", "name", "GPU", "memory", "arch",
                       "cuBLAS workspace");
    for (const GpuSpec& g : gpu_catalog()) {
      out << fmt::format("{:<11} {:<30} {:>10} {:>5} {:>16}\n", g.name, g.display,
                         format_bytes(g.total_bytes), fmt::format("sm{}", g.sm),
                         format_bytes(cublas_workspace_bytes(g.sm)));
    }
    return kExitOk;
  };
}

}  // namespace trainfit
