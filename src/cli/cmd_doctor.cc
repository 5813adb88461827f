// trainfit doctor: reads this host (CPU frequency policy, hybrid cores, idle states, affinity,
// thread variables, /dev/shm, open-files limit, memory, GPUs through NVML) and says what to fix.
// It never changes anything.
#include <memory>

#include "cli/cli.h"
#include "cli/host_options.h"
#include "host/doctor.h"
#include "host/doctor_report.h"

namespace trainfit {

CommandRun setup_doctor(CLI::App& app) {
  auto o = std::make_shared<HostOptions>();
  auto json = std::make_shared<bool>(false);
  app.footer(
      "Each finding has a severity (critical, warning, info), why it matters, and the command\n"
      "that fixes it. Without cpufreq (a VM) or without a GPU the rows say \"not available\".\n\n"
      "Examples:\n"
      "  trainfit doctor\n"
      "  trainfit doctor --json | jq '.findings[] | select(.severity != \"info\")'\n"
      "  trainfit doctor --root /mnt/host-snapshot --nvml "
      "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  add_host_options(app, *o);
  app.add_flag("--json", *json, "print one JSON object");
  return [o, json](std::ostream& out, std::ostream& err) {
    Result<HostFs> fs = host_fs(*o);
    if (!fs.ok()) return report_error(err, fs.status());
    const HostInfo host = read_host_info(*fs);
    const GpuReport gpus = read_gpu_report(*fs, o->nvml);
    const std::vector<Finding> findings = diagnose(host, gpus);
    if (*json) {
      out << json_text(doctor_json(host, gpus, findings)) << '\n';
    } else {
      out << doctor_text(host, gpus, findings);
    }
    return kExitOk;
  };
}

}  // namespace trainfit
