// trainfit doctor: reads this host (CPU frequency policy, hybrid cores, idle states, affinity,
// thread variables, /dev/shm, open-files limit, memory, GPUs through NVML) and says what to fix.
// It never changes anything. --pid judges a running trainer's affinity, thread variables and
// open files instead of trainfit's own.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/cli.h"
#include "cli/host_options.h"
#include "host/doctor.h"
#include "host/doctor_report.h"

namespace trainfit {

CommandRun setup_doctor(CLI::App& app) {
  auto o = std::make_shared<HostOptions>();
  auto json = std::make_shared<bool>(false);
  auto pid = std::make_shared<std::string>("self");
  app.footer(
      "Each finding has a severity (critical, warning, info), why it matters, and the command\n"
      "that fixes it. Without cpufreq (a VM) or without a GPU the rows say \"not available\".\n\n"
      "Examples:\n"
      "  trainfit doctor\n"
      "  trainfit doctor --pid $(pgrep -of train.py)    # judge a running trainer\n"
      "  trainfit doctor --json | jq '.findings[] | select(.severity != \"info\")'\n"
      "  trainfit doctor --root /mnt/host-snapshot --nvml "
      "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  add_host_options(app, *o);
  app.add_option("--pid", *pid,
                 "judge this running process's CPU affinity, thread variables and open files "
                 "(default: trainfit's own)")
      ->type_name("PID");
  app.add_flag("--json", *json, "print one JSON object");
  return [o, json, pid](std::ostream& out, std::ostream& err) {
    Result<HostFs> fs = host_fs(*o);
    if (!fs.ok()) return report_error(err, fs.status());
    if (*pid != "self") {
      const std::optional<int64_t> n = parse_int(*pid);
      if (!n || *n <= 0 || *n > INT32_MAX) {
        return report_error(err, invalid_argument(fmt::format("--pid {}: not a process id", *pid),
                                                  "give a positive number, e.g. --pid "
                                                  "$(pgrep -of train.py)"));
      }
      *pid = std::to_string(*n);
      if (!fs->exists(fmt::format("/proc/{}/status", *pid))) {
        return report_error(err, invalid_argument(fmt::format("--pid {}: no such process", *pid),
                                                  "`pgrep -af python` lists running Python "
                                                  "processes with their PIDs"));
      }
    }
    const HostInfo host = read_host_info(*fs, *pid);
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
