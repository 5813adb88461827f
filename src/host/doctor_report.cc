#include "host/doctor_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/units.h"
#include "host/stats.h"

namespace trainfit {
namespace {

constexpr const char* kNotAvailable = "not available";
constexpr size_t kFindingIndent = 11;  // "critical" and three blanks

// Words of `text` on lines of at most `width` columns: the first starts with `first`, the
// rest with `rest`. A word longer than a line gets a line of its own.
std::string wrap(const std::string& text, const std::string& first, const std::string& rest,
                 size_t width) {
  std::string out = first;
  size_t column = first.size();
  bool line_empty = true;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = std::min(text.find(' ', i), text.size());
    const std::string word = text.substr(i, end - i);
    i = end + 1;
    if (word.empty()) continue;
    if (!line_empty && column + 1 + word.size() > width) {
      out += '\n' + rest;
      column = rest.size();
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    line_empty = false;
  }
  return out + '\n';
}

void row(std::string& out, const std::string& key, const std::string& value, int indent = 2) {
  out += fmt::format("{:{}}{:<12}{}\n", "", indent, key, value);
}

std::string frequency_row(const CpuInfo& cpu) {
  std::optional<int64_t> lo;
  std::optional<int64_t> hi;
  std::optional<int64_t> hw;
  for (const CpuPolicy& p : cpu.policies) {
    if (p.min_khz) lo = std::min(lo.value_or(*p.min_khz), *p.min_khz);
    if (p.max_khz) hi = std::max(hi.value_or(*p.max_khz), *p.max_khz);
    if (p.hw_max_khz) hw = std::max(hw.value_or(*p.hw_max_khz), *p.hw_max_khz);
  }
  std::string out;
  if (lo && hi) {
    out = fmt::format("policy {}-{} MHz", *lo / 1000, *hi / 1000);
    if (hw && *hw != *hi) out += fmt::format(" (hardware max {} MHz)", *hw / 1000);
    out += "; ";
  }
  if (cpu.cur_mhz.empty()) return out + "now " + kNotAvailable;
  const auto [mn, mx] = std::minmax_element(cpu.cur_mhz.begin(), cpu.cur_mhz.end());
  const std::string source = cpu.policies.empty() ? " (/proc/cpuinfo)" : "";
  if (*mx - *mn < 1) return out + fmt::format("now {:.0f} MHz on every CPU{}", *mn, source);
  return out +
         fmt::format("now {:.0f}-{:.0f} MHz, mean {:.0f}{}", *mn, *mx, mean(cpu.cur_mhz), source);
}

std::string idle_row(const CpuInfo& cpu) {
  if (cpu.idle_states.empty()) {
    return cpu.idle_driver.empty() || cpu.idle_driver == "none"
               ? std::string(kNotAvailable) + " (no cpuidle states)"
               : cpu.idle_driver;
  }
  std::string out = fmt::format("{} / {}:", cpu.idle_driver, cpu.idle_governor);
  for (const IdleState& s : cpu.idle_states) {
    out += fmt::format(" {} {} us{},", s.name, s.latency_us, s.disabled ? " (disabled)" : "");
  }
  out.pop_back();
  return out;
}

std::string qos_row(const CpuInfo& cpu) {
  if (!cpu.dma_latency_us) return "/dev/cpu_dma_latency not readable (root only)";
  if (*cpu.dma_latency_us >= kNoQosConstraintUs) return "no request held (default)";
  return fmt::format("a process holds wake-up latency <= {} us", *cpu.dma_latency_us);
}

std::string turbo_row(const CpuInfo& cpu) {
  if (cpu.no_turbo) return *cpu.no_turbo ? "off (intel_pstate/no_turbo = 1)" : "on";
  if (cpu.boost) return *cpu.boost ? "on" : "off (cpufreq/boost = 0)";
  return kNotAvailable;
}

// What decides whether forking DataLoader workers can fail with "Cannot allocate memory".
std::string commit_row(const MemoryInfo& m) {
  if (!m.overcommit_memory) return kNotAvailable;
  static constexpr const char* kModes[] = {"heuristic", "always", "strict: forks are charged"};
  std::string row = fmt::format("vm.overcommit_memory={} ({})", *m.overcommit_memory,
                                *m.overcommit_memory >= 0 && *m.overcommit_memory <= 2
                                    ? kModes[*m.overcommit_memory]
                                    : "unknown");
  if (m.commit_limit_bytes && m.committed_as_bytes) {
    row += fmt::format("; committed {} of a limit of {}", format_bytes(*m.committed_as_bytes),
                       format_bytes(*m.commit_limit_bytes));
  }
  return row;
}

std::string cgroup_row(const MemoryInfo& m) {
  if (!m.cgroup_readable) return kNotAvailable;
  return fmt::format(
      "memory {}, CPU {}",
      m.cgroup_memory_max_bytes ? format_bytes(*m.cgroup_memory_max_bytes) : "no limit",
      m.cgroup_cpu_quota ? fmt::format("{:.2g} cores", *m.cgroup_cpu_quota) : "no quota");
}

std::string gpu_text(const GpuStatus& g, const std::vector<std::string>& names) {
  std::string out = fmt::format("  {} {}\n", g.index, g.name.empty() ? "(unnamed)" : g.name);
  const auto na = [](bool known, const std::string& s) { return known ? s : kNotAvailable; };
  row(out, "memory",
      na(g.memory_used_bytes && g.memory_total_bytes,
         fmt::format("{} used of {}", format_bytes(g.memory_used_bytes.value_or(0)),
                     format_bytes(g.memory_total_bytes.value_or(0)))),
      4);
  std::string power = na(g.power_w.has_value(), fmt::format("{:.0f} W", g.power_w.value_or(0)));
  if (g.power_limit_w) {
    power += fmt::format(" of {:.0f} W limit", *g.power_limit_w);
    if (g.power_default_limit_w)
      power += fmt::format(" (default {:.0f} W", *g.power_default_limit_w);
    if (g.power_max_limit_w) power += fmt::format(", max {:.0f} W", *g.power_max_limit_w);
    if (g.power_default_limit_w) power += ")";
  }
  row(out, "power", power, 4);
  row(out, "clocks",
      na(g.sm_mhz.has_value(),
         fmt::format("SM {} of {} MHz, memory {} of {} MHz", g.sm_mhz.value_or(0),
                     g.sm_max_mhz.value_or(0), g.mem_mhz.value_or(0), g.mem_max_mhz.value_or(0))),
      4);
  row(out, "utilization",
      na(g.util_gpu_pct.has_value(),
         fmt::format("{}% GPU, {}% memory; {}", g.util_gpu_pct.value_or(0),
                     g.util_mem_pct.value_or(0),
                     g.temperature_c ? fmt::format("{} C", *g.temperature_c) : "temperature n/a")),
      4);
  row(out, "PCIe",
      na(g.pcie_gen.has_value(), fmt::format("Gen{} x{} (max Gen{} x{}{})", g.pcie_gen.value_or(0),
                                             g.pcie_width.value_or(0), g.pcie_gen_max.value_or(0),
                                             g.pcie_width_max.value_or(0),
                                             g.util_gpu_pct.value_or(0) < 10 && g.processes.empty()
                                                 ? "; links slow down at idle"
                                                 : "")),
      4);
  row(out, "persistence", g.persistence ? (*g.persistence ? "on" : "off") : kNotAvailable, 4);
  std::string throttle = kNotAvailable;
  if (g.throttle_reasons) {
    throttle = throttle_reason_names(*g.throttle_reasons);
    if (throttle.empty())
      throttle = (*g.throttle_reasons & kThrottleGpuIdle) ? "none (idle)" : "none";
  }
  row(out, "throttle", throttle, 4);
  std::string procs = g.processes.empty() ? "none" : "";
  for (size_t i = 0; i < g.processes.size(); ++i) {
    const GpuProcess& p = g.processes[i];
    procs +=
        fmt::format("{}{} {} ({})", i == 0 ? "" : ", ", p.pid, i < names.size() ? names[i] : "?",
                    p.used_bytes ? format_bytes(*p.used_bytes) : std::string("n/a"));
  }
  row(out, "processes", procs, 4);
  return out;
}

nlohmann::json gpu_json(const GpuStatus& g, const std::vector<std::string>& names) {
  nlohmann::json procs = nlohmann::json::array();
  for (size_t i = 0; i < g.processes.size(); ++i) {
    procs.push_back({{"pid", g.processes[i].pid},
                     {"name", i < names.size() ? names[i] : "?"},
                     {"used_bytes", json_or_null(g.processes[i].used_bytes)}});
  }
  return {{"index", g.index},
          {"name", g.name},
          {"memory_total_bytes", json_or_null(g.memory_total_bytes)},
          {"memory_used_bytes", json_or_null(g.memory_used_bytes)},
          {"persistence", json_or_null(g.persistence)},
          {"power_w", json_or_null(g.power_w)},
          {"power_limit_w", json_or_null(g.power_limit_w)},
          {"power_default_limit_w", json_or_null(g.power_default_limit_w)},
          {"power_max_limit_w", json_or_null(g.power_max_limit_w)},
          {"temperature_c", json_or_null(g.temperature_c)},
          {"util_gpu_pct", json_or_null(g.util_gpu_pct)},
          {"util_mem_pct", json_or_null(g.util_mem_pct)},
          {"sm_mhz", json_or_null(g.sm_mhz)},
          {"sm_max_mhz", json_or_null(g.sm_max_mhz)},
          {"mem_mhz", json_or_null(g.mem_mhz)},
          {"mem_max_mhz", json_or_null(g.mem_max_mhz)},
          {"pcie_gen", json_or_null(g.pcie_gen)},
          {"pcie_gen_max", json_or_null(g.pcie_gen_max)},
          {"pcie_width", json_or_null(g.pcie_width)},
          {"pcie_width_max", json_or_null(g.pcie_width_max)},
          {"throttle_reasons", g.throttle_reasons
                                   ? nlohmann::json(throttle_reason_names(*g.throttle_reasons))
                                   : nlohmann::json(nullptr)},
          {"processes", procs}};
}

}  // namespace

std::string doctor_text(const HostInfo& host, const GpuReport& gpus,
                        const std::vector<Finding>& findings) {
  const CpuInfo& cpu = host.cpu;
  std::string out =
      "trainfit doctor: this host for training and fixed-rate loops (read-only)\n\nCPU\n";
  row(out, "model", cpu.model.empty() ? kNotAvailable : cpu.model);
  row(out, "online",
      cpu.online.empty()
          ? std::string(kNotAvailable)
          : fmt::format("{} CPUs ({}); {} may use {}", cpu.online.size(),
                        format_cpu_list(cpu.online), process_label(host.process),
                        cpu.affinity.empty() ? kNotAvailable : format_cpu_list(cpu.affinity)));
  if (!cpu.p_cores.empty() || !cpu.e_cores.empty()) {
    std::string hybrid = fmt::format("P-cores {}, E-cores {}", format_cpu_list(cpu.p_cores),
                                     format_cpu_list(cpu.e_cores));
    if (!cpu.lp_cores.empty())
      hybrid += fmt::format(", LP E-cores {}", format_cpu_list(cpu.lp_cores));
    row(out, "hybrid", hybrid);
  }
  row(out, "cpufreq", governor_summary(cpu));
  row(out, "frequency", frequency_row(cpu));
  row(out, "turbo", turbo_row(cpu));
  row(out, "idle", idle_row(cpu));
  row(out, "PM QoS", qos_row(cpu));
  row(out, "tuned", cpu.tuned_profile.empty() ? "no active profile" : cpu.tuned_profile);
  std::string env;
  for (const std::string& name : thread_env_names()) {
    auto it = host.process.thread_env.find(name);
    const bool always =
        name == "OMP_NUM_THREADS" || name == "MKL_NUM_THREADS" || name == "OPENBLAS_NUM_THREADS";
    if (it == host.process.thread_env.end() && !always) continue;
    env += fmt::format("{}{}={}", env.empty() ? "" : ", ", name,
                       it == host.process.thread_env.end() ? "(unset)" : it->second);
  }
  if (!host.process.env_readable) {
    env = fmt::format("{} (only the process's owner or root can read /proc/{}/environ)",
                      kNotAvailable, host.process.pid);
  }
  row(out, "env", env);

  out += "Memory\n";
  const MemoryInfo& m = host.memory;
  row(out, "RAM",
      m.total_bytes
          ? fmt::format("{}, {} available; swap {}", format_bytes(*m.total_bytes),
                        m.available_bytes ? format_bytes(*m.available_bytes) : kNotAvailable,
                        format_bytes(m.swap_total_bytes.value_or(0)))
          : kNotAvailable);
  row(out, "/dev/shm",
      m.shm ? fmt::format("{}, {} free", format_bytes(m.shm->total_bytes),
                          format_bytes(m.shm->free_bytes))
            : kNotAvailable);
  row(out, "commit", commit_row(m));
  row(out, "cgroup", cgroup_row(m));
  row(out, "map count",
      m.max_map_count
          ? fmt::format("vm.max_map_count {} per process", format_count(*m.max_map_count))
          : kNotAvailable);
  const ProcessInfo& p = host.process;
  const auto limit = [](int64_t v) {
    return v < 0 ? std::string("unlimited") : fmt::format("{}", v);
  };
  std::string files = p.nofile_soft
                          ? fmt::format("{} (hard {})", limit(*p.nofile_soft),
                                        p.nofile_hard ? limit(*p.nofile_hard) : kNotAvailable)
                          : std::string(kNotAvailable);
  if (p.open_fds) files += fmt::format(", {} in use", *p.open_fds);
  row(out, "open files", files);
  if (p.pid != "self") {
    row(out, "process",
        fmt::format("{}{}{}", p.pid, p.name.empty() ? "" : fmt::format(" ({})", p.name),
                    p.threads ? fmt::format(", {} thread{}", *p.threads, *p.threads == 1 ? "" : "s")
                              : std::string()));
  }

  if (!gpus.error.empty()) {
    out += fmt::format("GPU\n  {} ({})\n", kNotAvailable, gpus.error);
  } else {
    out += fmt::format("GPU (NVIDIA driver {})\n", gpus.driver.empty() ? "?" : gpus.driver);
    for (size_t i = 0; i < gpus.gpus.size(); ++i) {
      out += gpu_text(gpus.gpus[i], i < gpus.process_names.size() ? gpus.process_names[i]
                                                                  : std::vector<std::string>{});
    }
  }

  int counts[3] = {0, 0, 0};
  for (const Finding& f : findings) ++counts[static_cast<int>(f.severity)];
  out += fmt::format("\nFindings: {} critical, {} warning, {} info\n", counts[2], counts[1],
                     counts[0]);
  if (findings.empty()) out += "  nothing to fix\n";
  return out + findings_text(findings);
}

std::string findings_text(const std::vector<Finding>& findings, const std::string& prefix,
                          size_t width) {
  std::string out;
  const std::string hang = prefix + std::string(kFindingIndent, ' ');
  for (const Finding& f : findings) {
    out += wrap(f.title, fmt::format("{}{:<8}   ", prefix, severity_name(f.severity)), hang, width);
    out += wrap("why: " + f.why, hang, hang + "     ", width);
    if (!f.fix.empty()) out += hang + "fix: " + f.fix + '\n';
  }
  return out;
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json findings_json(const std::vector<Finding>& findings) {
  nlohmann::json list = nlohmann::json::array();
  for (const Finding& f : findings) {
    list.push_back({{"id", f.id},
                    {"severity", severity_name(f.severity)},
                    {"title", f.title},
                    {"why", f.why},
                    {"fix", f.fix.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.fix)}});
  }
  return list;
}

nlohmann::json doctor_json(const HostInfo& host, const GpuReport& gpus,
                           const std::vector<Finding>& findings) {
  const CpuInfo& cpu = host.cpu;
  nlohmann::json policies = nlohmann::json::array();
  for (const CpuPolicy& p : cpu.policies) {
    policies.push_back({{"name", p.name},
                        {"cpus", format_cpu_list(p.cpus)},
                        {"driver", p.driver},
                        {"governor", p.governor},
                        {"epp", p.epp.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.epp)},
                        {"min_khz", json_or_null(p.min_khz)},
                        {"max_khz", json_or_null(p.max_khz)},
                        {"cur_khz", json_or_null(p.cur_khz)},
                        {"hw_max_khz", json_or_null(p.hw_max_khz)},
                        {"base_khz", json_or_null(p.base_khz)}});
  }
  nlohmann::json idle = nlohmann::json::array();
  for (const IdleState& s : cpu.idle_states) {
    idle.push_back({{"name", s.name},
                    {"latency_us", s.latency_us},
                    {"residency_us", s.residency_us},
                    {"disabled", s.disabled}});
  }
  const auto text_or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
  };
  nlohmann::json cpu_json = {{"model", text_or_null(cpu.model)},
                             {"online", format_cpu_list(cpu.online)},
                             {"affinity", format_cpu_list(cpu.affinity)},
                             {"cpufreq_available", !cpu.policies.empty()},
                             {"policies", policies},
                             {"intel_pstate_status", text_or_null(cpu.intel_pstate_status)},
                             {"amd_pstate_status", text_or_null(cpu.amd_pstate_status)},
                             {"no_turbo", json_or_null(cpu.no_turbo)},
                             {"boost", json_or_null(cpu.boost)},
                             {"p_cores", format_cpu_list(cpu.p_cores)},
                             {"e_cores", format_cpu_list(cpu.e_cores)},
                             {"lp_cores", format_cpu_list(cpu.lp_cores)},
                             {"idle_driver", text_or_null(cpu.idle_driver)},
                             {"idle_governor", text_or_null(cpu.idle_governor)},
                             {"idle_states", idle},
                             {"dma_latency_us", json_or_null(cpu.dma_latency_us)},
                             {"tuned_profile", text_or_null(cpu.tuned_profile)},
                             {"cur_mhz", cpu.cur_mhz}};
  const MemoryInfo& m = host.memory;
  nlohmann::json memory = {
      {"total_bytes", json_or_null(m.total_bytes)},
      {"available_bytes", json_or_null(m.available_bytes)},
      {"swap_total_bytes", json_or_null(m.swap_total_bytes)},
      {"shm_total_bytes", m.shm ? nlohmann::json(m.shm->total_bytes) : nlohmann::json(nullptr)},
      {"shm_free_bytes", m.shm ? nlohmann::json(m.shm->free_bytes) : nlohmann::json(nullptr)},
      {"commit_limit_bytes", json_or_null(m.commit_limit_bytes)},
      {"committed_as_bytes", json_or_null(m.committed_as_bytes)},
      {"overcommit_memory", json_or_null(m.overcommit_memory)},
      {"max_map_count", json_or_null(m.max_map_count)},
      {"cgroup_memory_max_bytes", json_or_null(m.cgroup_memory_max_bytes)},
      {"cgroup_cpu_quota", json_or_null(m.cgroup_cpu_quota)}};
  const ProcessInfo& p = host.process;
  nlohmann::json process = {
      {"pid", p.pid == "self" ? nlohmann::json(nullptr) : json_or_null(parse_int(p.pid))},
      {"name", text_or_null(p.name)},
      {"env_readable", p.env_readable},
      {"thread_env", p.thread_env},
      {"threads", json_or_null(p.threads)},
      {"open_fds", json_or_null(p.open_fds)},
      {"nofile_soft", json_or_null(p.nofile_soft)},
      {"nofile_hard", json_or_null(p.nofile_hard)}};
  nlohmann::json gpu_list = nlohmann::json::array();
  for (size_t i = 0; i < gpus.gpus.size(); ++i) {
    gpu_list.push_back(gpu_json(gpus.gpus[i], i < gpus.process_names.size()
                                                  ? gpus.process_names[i]
                                                  : std::vector<std::string>{}));
  }
  nlohmann::json gpu = {{"available", gpus.error.empty()},
                        {"error", text_or_null(gpus.error)},
                        {"driver", text_or_null(gpus.driver)},
                        {"gpus", gpu_list}};
  return {{"cpu", cpu_json},
          {"process", process},
          {"memory", memory},
          {"gpu", gpu},
          {"findings", findings_json(findings)}};
}

}  // namespace trainfit
