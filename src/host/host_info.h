// A read-only snapshot of what on a host decides how well it feeds a GPU and runs a fixed-rate
// loop: CPU frequency policies, the hybrid core layout, idle states and PM QoS, a process's
// affinity, thread variables and open-files limit, memory and /dev/shm.
//
//   HostInfo info = read_host_info(HostFs("/"));          // this process
//   HostInfo run = read_host_info(HostFs("/"), "4242");   // a running trainer
//   if (info.cpu.policies.empty()) ...   // cpufreq not exposed (a VM)
//
// Fields a host does not expose stay empty or nullopt; the doctor says "not available".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/host_fs.h"

namespace trainfit {

// One /sys/devices/system/cpu/cpufreq/policyN.
struct CpuPolicy {
  std::string name;                   // "policy0"
  std::vector<int> cpus;              // affected_cpus
  std::string driver;                 // scaling_driver: intel_pstate, acpi-cpufreq, amd-pstate-epp
  std::string governor;               // scaling_governor
  std::string epp;                    // energy_performance_preference, "" when absent
  std::optional<int64_t> min_khz;     // scaling_min_freq
  std::optional<int64_t> max_khz;     // scaling_max_freq
  std::optional<int64_t> cur_khz;     // scaling_cur_freq
  std::optional<int64_t> hw_max_khz;  // cpuinfo_max_freq (with turbo)
  std::optional<int64_t> base_khz;    // base_frequency (intel_pstate with HWP)
};

// One cpuidle state as cpu0 (the first online CPU) shows it.
struct IdleState {
  std::string name;          // POLL, C1, C6, ...
  int64_t latency_us = 0;    // exit latency
  int64_t residency_us = 0;  // target residency
  bool disabled = false;     // disabled on that CPU
};

struct CpuInfo {
  std::string model;                // /proc/cpuinfo "model name"
  std::vector<int> online;          // /sys/devices/system/cpu/online
  std::vector<int> affinity;        // Cpus_allowed_list of the inspected process
  std::vector<CpuPolicy> policies;  // empty: cpufreq not exposed
  std::string intel_pstate_status;  // active | passive | off, "" when absent
  std::string amd_pstate_status;    // active | passive | guided | disable, "" when absent
  std::optional<bool> no_turbo;     // intel_pstate/no_turbo
  std::optional<bool> boost;        // cpufreq/boost (acpi-cpufreq, amd-pstate)
  std::vector<int> p_cores;         // hybrid parts only: /sys/devices/cpu_core/cpus
  std::vector<int> e_cores;         // /sys/devices/cpu_atom/cpus
  std::vector<int> lp_cores;        // /sys/devices/cpu_lowpower/cpus
  std::string idle_driver;          // cpuidle/current_driver ("none" or "" without cpuidle)
  std::string idle_governor;
  std::vector<IdleState> idle_states;
  std::optional<int64_t> dma_latency_us;  // /dev/cpu_dma_latency aggregate; nullopt: unreadable
  std::string tuned_profile;              // /etc/tuned/active_profile, "" when none
  std::vector<double> cur_mhz;            // per online CPU where known (cpufreq or /proc/cpuinfo)
};

// The process whose settings the doctor judges: trainfit itself, or a trainer named by PID.
struct ProcessInfo {
  std::string pid = "self";                       // the /proc entry: "self" or a PID
  std::string name;                               // status "Name:" (the command, 15 chars)
  bool env_readable = false;                      // environ is only readable by its owner
  std::map<std::string, std::string> thread_env;  // the thread variables that are set
  std::optional<int64_t> threads;                 // status "Threads:"
  std::optional<int64_t> open_fds;                // entries in fd/; nullopt when unreadable
  std::optional<int64_t> nofile_soft;             // RLIMIT_NOFILE; -1 is unlimited
  std::optional<int64_t> nofile_hard;
};

// What a DataLoader's workers and batches meet (trainfit loader plans against the same limits).
struct MemoryInfo {
  std::optional<int64_t> total_bytes;      // MemTotal
  std::optional<int64_t> available_bytes;  // MemAvailable
  std::optional<int64_t> swap_total_bytes;
  std::optional<FsSpace> shm;                 // /dev/shm
  std::optional<int64_t> commit_limit_bytes;  // CommitLimit: enforced under overcommit mode 2
  std::optional<int64_t> committed_as_bytes;  // Committed_AS
  std::optional<int64_t>
      overcommit_memory;                 // vm.overcommit_memory: 0 heuristic, 1 always, 2 strict
  std::optional<int64_t> max_map_count;  // vm.max_map_count: mappings per process
  bool cgroup_readable = false;          // /proc/PID/cgroup could be read
  std::optional<int64_t> cgroup_memory_max_bytes;  // the process's cgroup; nullopt: no limit
  std::optional<double> cgroup_cpu_quota;          // cores; nullopt: no quota
};

struct HostInfo {
  CpuInfo cpu;
  ProcessInfo process;
  MemoryInfo memory;
};

// /dev/cpu_dma_latency with no PM QoS request held: no constraint on idle states.
inline constexpr int64_t kNoQosConstraintUs = 2000000000;

// The thread variables the doctor reports, in order.
const std::vector<std::string>& thread_env_names();

// `pid` is "self" or the decimal PID of another process on the same host (or recorded tree).
HostInfo read_host_info(const HostFs& fs, const std::string& pid = "self");

// How reports name the process: "this process" or "process 4242 (python3)".
std::string process_label(const ProcessInfo& p);

// /sys/devices/system/cpu/online as a list; empty when unreadable.
std::vector<int> read_online_cpus(const HostFs& fs);

// Per-CPU MHz now: scaling_cur_freq where cpufreq exists, else /proc/cpuinfo's "cpu MHz".
std::vector<double> read_cpu_mhz(const HostFs& fs, const std::vector<int>& cpus);

// One CPU's MHz now: its scaling_cur_freq, else its "cpu MHz" in /proc/cpuinfo.
std::optional<double> read_one_cpu_mhz(const HostFs& fs, int cpu);

// `/proc/meminfo` value of `key` ("MemTotal") in bytes.
std::optional<int64_t> meminfo_bytes(const std::string& meminfo, const std::string& key);

}  // namespace trainfit
