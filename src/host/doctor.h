// What the doctor concludes from a host snapshot: findings, each with a severity, one sentence
// of why it matters and the exact command that fixes it. Pure functions of the snapshot, so the
// tests feed recorded machines.
//
//   HostInfo host = read_host_info(HostFs("/"));
//   GpuReport gpus = read_gpu_report(HostFs("/"), "");
//   for (const Finding& f : diagnose(host, gpus)) ...
#pragma once

#include <string>
#include <vector>

#include "host/host_info.h"
#include "host/nvml.h"

namespace trainfit {

enum class Severity : uint8_t { kInfo, kWarning, kCritical };
const char* severity_name(Severity s);  // "info", "warning", "critical"

struct Finding {
  std::string id;  // stable: "cpu.governor", "mem.shm", "gpu.power_limit", ...
  Severity severity = Severity::kInfo;
  std::string title;  // what was found, with the numbers
  std::string why;    // one sentence: why it matters for training or a fixed-rate loop
  std::string fix;    // the exact command; "" when there is nothing to run
};

// Most severe first, then in the order of the report's sections.
std::vector<Finding> diagnose(const HostInfo& host, const GpuReport& gpus);

// The fixes the doctor and the latency verdict share: the performance governor, and idle states
// no deeper than a loop can afford to wake from.
std::string governor_fix();
std::string idle_states_fix();

// The governor story in one line: "intel_pstate (active), powersave, EPP balance_performance
// on 24 policies"; "not available (no cpufreq)" without one.
std::string governor_summary(const CpuInfo& cpu);

}  // namespace trainfit
