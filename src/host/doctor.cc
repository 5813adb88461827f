#include "host/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/units.h"

namespace trainfit {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// Below this, DataLoader workers with image batches run out of /dev/shm within a few batches.
constexpr int64_t kShmCriticalBytes = 1 * kGiB;
constexpr int64_t kShmWarningBytes = 4 * kGiB;
// Each shared tensor a worker sends is an open file descriptor until the batch is consumed.
constexpr int64_t kNofileLow = 4096;
constexpr int64_t kNofileWanted = 65536;
// An idle state whose exit latency reaches this is worth knowing for a fixed-rate loop.
constexpr int64_t kDeepIdleLatencyUs = 20;
constexpr double kPowerCapShare = 0.95;
// A GPU this busy (or with a process on it) is loaded: its PCIe link should be up to speed.
constexpr int kLoadedUtilPct = 50;

bool generic_driver(const std::string& driver, const CpuInfo& cpu) {
  if (driver == "intel_pstate") return false;  // active mode: powersave is its own algorithm
  if (driver == "amd-pstate-epp") return false;
  if (driver == "amd-pstate") return cpu.amd_pstate_status != "active";
  return true;  // acpi-cpufreq, intel_cpufreq (intel_pstate passive), cpufreq-dt, ...
}

std::string mhz(int64_t khz) {
  return fmt::format("{} MHz", khz / 1000);
}

// The policies' (driver, governor, EPP) combinations, with how many policies have each.
std::map<std::tuple<std::string, std::string, std::string>, int> governor_groups(
    const CpuInfo& cpu) {
  std::map<std::tuple<std::string, std::string, std::string>, int> groups;
  for (const CpuPolicy& p : cpu.policies) ++groups[{p.driver, p.governor, p.epp}];
  return groups;
}

void check_governor(const CpuInfo& cpu, std::vector<Finding>& out) {
  if (cpu.policies.empty()) {
    out.push_back({"cpu.cpufreq", Severity::kInfo,
                   "CPU frequency scaling is not exposed (no /sys/devices/system/cpu/cpufreq)",
                   "In a VM or container the hypervisor sets the clocks, so there is no governor "
                   "to check here; `trainfit latency` still measures what a loop gets.",
                   ""});
    return;
  }
  for (const auto& [key, count] : governor_groups(cpu)) {
    const auto& [driver, governor, epp] = key;
    const std::string where =
        count == static_cast<int>(cpu.policies.size()) ? "all" : fmt::format("{}", count);
    if (governor == "performance") continue;
    Finding f;
    f.id = "cpu.governor";
    f.fix = governor_fix();
    if (governor == "powersave" && !generic_driver(driver, cpu)) {
      const bool epp_fast = epp == "performance" || epp == "0";
      f.severity = epp_fast ? Severity::kInfo : Severity::kWarning;
      f.title = fmt::format("governor powersave on {} policies ({} with EPP {})", where, driver,
                            epp.empty() ? "not exposed" : epp);
      f.why = epp_fast
                  ? "This powersave is the driver's own load-following algorithm and EPP "
                    "performance keeps the clock high, so loops are not slowed."
                  : "This powersave lets the hardware drop the clock while the CPU waits between "
                    "frames: a 30 Hz loop then runs the same work slower than a 60 Hz one.";
      if (epp_fast) f.fix.clear();
    } else if (governor == "powersave") {
      f.severity = Severity::kCritical;
      f.title = fmt::format(
          "governor powersave on {} policies ({}): the CPU runs at its lowest "
          "frequency",
          where, driver);
      f.why =
          "The generic powersave governor pins every core at its minimum clock, so data "
          "loading and every frame of a control loop run several times slower.";
    } else if (governor == "userspace") {
      f.severity = Severity::kInfo;
      f.title = fmt::format("governor userspace on {} policies ({}): a fixed clock set by hand",
                            where, driver);
      f.why =
          "The clock stays wherever scaling_setspeed was set, which may be well below the "
          "maximum.";
    } else {
      f.severity = Severity::kWarning;
      f.title = fmt::format("governor {} on {} policies ({})", governor, where, driver);
      f.why =
          "It follows recent load, so a loop that sleeps between frames gets a lower clock "
          "at a lower rate: the same work takes longer at 30 Hz than at 60 Hz.";
    }
    out.push_back(std::move(f));
  }
}

void check_turbo_and_caps(const CpuInfo& cpu, std::vector<Finding>& out) {
  if (cpu.no_turbo.value_or(false)) {
    out.push_back({"cpu.turbo", Severity::kWarning, "turbo is disabled (intel_pstate/no_turbo = 1)",
                   "Single-thread work such as the training main loop and inference runs at the "
                   "base clock instead of the turbo clock.",
                   "echo 0 | sudo tee /sys/devices/system/cpu/intel_pstate/no_turbo"});
  } else if (cpu.boost.has_value() && !*cpu.boost) {
    out.push_back({"cpu.turbo", Severity::kWarning, "boost is disabled (cpufreq/boost = 0)",
                   "Single-thread work such as the training main loop and inference runs at the "
                   "base clock instead of the boost clock.",
                   "echo 1 | sudo tee /sys/devices/system/cpu/cpufreq/boost"});
  }
  if (cpu.no_turbo.value_or(false)) return;  // no_turbo lowers scaling_max_freq by itself
  int capped = 0;
  int64_t cap_khz = 0;
  int64_t hw_khz = 0;
  for (const CpuPolicy& p : cpu.policies) {
    if (p.max_khz && p.hw_max_khz && *p.max_khz < *p.hw_max_khz) {
      ++capped;
      cap_khz = *p.max_khz;
      hw_khz = std::max(hw_khz, *p.hw_max_khz);
    }
  }
  if (capped > 0) {
    out.push_back({"cpu.max_freq", Severity::kWarning,
                   fmt::format("maximum frequency capped on {} policies ({} of {})", capped,
                               mhz(cap_khz), mhz(hw_khz)),
                   "Someone lowered scaling_max_freq, so the CPU never reaches its rated clock.",
                   fmt::format("sudo cpupower frequency-set -u {}MHz", hw_khz / 1000)});
  }
}

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::optional<int64_t> max_khz_of(const CpuInfo& cpu, const std::vector<int>& cpus) {
  std::optional<int64_t> best;
  for (const CpuPolicy& p : cpu.policies) {
    if (!p.hw_max_khz || intersect(p.cpus, cpus).empty()) continue;
    best = std::max(best.value_or(0), *p.hw_max_khz);
  }
  return best;
}

void check_topology(const HostInfo& host, std::vector<Finding>& out) {
  const CpuInfo& cpu = host.cpu;
  const std::string who = process_label(host.process);
  const std::vector<int> slow_cores = [&] {
    std::vector<int> all = cpu.e_cores;
    all.insert(all.end(), cpu.lp_cores.begin(), cpu.lp_cores.end());
    std::sort(all.begin(), all.end());
    return all;
  }();
  const std::vector<int> on_slow = intersect(cpu.affinity, slow_cores);
  if (!cpu.p_cores.empty() && !on_slow.empty()) {
    std::string speeds;
    const auto p_max = max_khz_of(cpu, cpu.p_cores);
    const auto e_max = max_khz_of(cpu, slow_cores);
    if (p_max && e_max) {
      speeds = fmt::format(" (max {}; P-cores {})", mhz(*e_max), mhz(*p_max));
    }
    out.push_back(
        {"cpu.hybrid", Severity::kInfo,
         fmt::format("hybrid CPU: {} may run on E-cores {}{}", who, format_cpu_list(on_slow),
                     speeds),
         "The scheduler can put the training main process or a control loop on a slower E-core; "
         "pinning keeps them on P-cores and leaves the E-cores to DataLoader workers.",
         fmt::format("taskset -c {} python train.py ...", format_cpu_list(cpu.p_cores))});
  }
  // Pinned to exactly the P-cores is the fix above, not a limit to report.
  const bool pinned_to_p_cores = !cpu.p_cores.empty() && cpu.affinity == cpu.p_cores;
  if (!cpu.affinity.empty() && !cpu.online.empty() && cpu.affinity.size() < cpu.online.size() &&
      !pinned_to_p_cores) {
    out.push_back({"cpu.affinity", Severity::kInfo,
                   fmt::format("{} may use {} of {} online CPUs ({})", who, cpu.affinity.size(),
                               cpu.online.size(), format_cpu_list(cpu.affinity)),
                   "A taskset, cgroup or container limit applies: size num_workers and thread "
                   "counts to these CPUs, not to the machine.",
                   fmt::format("taskset -c {} python train.py ...   (if the limit is unintended)",
                               format_cpu_list(cpu.online))});
  }
}

void check_idle(const CpuInfo& cpu, std::vector<Finding>& out) {
  const IdleState* deepest = nullptr;
  for (const IdleState& s : cpu.idle_states) {
    if (!s.disabled && (deepest == nullptr || s.latency_us > deepest->latency_us)) deepest = &s;
  }
  if (deepest == nullptr || deepest->latency_us < kDeepIdleLatencyUs) return;
  const int64_t qos = cpu.dma_latency_us.value_or(kNoQosConstraintUs);
  if (qos < deepest->latency_us) return;  // someone holds a PM QoS request that rules it out
  out.push_back({"cpu.cstates", Severity::kInfo,
                 fmt::format("deep idle state {} enabled: {} us to wake ({} / {})", deepest->name,
                             deepest->latency_us, cpu.idle_driver, cpu.idle_governor),
                 "A loop that sleeps between frames may pay this wake-up on every frame; "
                 "`trainfit latency --hold-dma-latency` shows whether it does.",
                 idle_states_fix()});
}

void check_threads(const HostInfo& host, std::vector<Finding>& out) {
  const auto& env = host.process.thread_env;
  const size_t cpus =
      !host.cpu.affinity.empty() ? host.cpu.affinity.size() : host.cpu.online.size();
  for (const char* name : {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    auto it = env.find(name);
    if (it == env.end()) continue;
    std::optional<int64_t> n = parse_int(it->second);
    if (n && cpus > 0 && *n > static_cast<int64_t>(cpus)) {
      out.push_back(
          {"env.threads", Severity::kWarning,
           fmt::format("{}={} but {} may use {} CPUs", name, *n, process_label(host.process), cpus),
           "More compute threads than CPUs time-slice against each other and against "
           "DataLoader workers.",
           fmt::format("export {}={}", name, cpus)});
    }
  }
  // Another user's process hides its environment: nothing can be said of its variables.
  if (host.process.env_readable && env.count("OMP_NUM_THREADS") == 0) {
    out.push_back({"env.threads", Severity::kInfo,
                   "OMP_NUM_THREADS and MKL_NUM_THREADS are not set",
                   fmt::format("Code in DataLoader workers that uses OpenMP or MKL (NumPy, OpenCV, "
                               "augmentations) may start {} threads per worker, which then fight "
                               "for the CPUs.",
                               cpus > 0 ? fmt::format("{}", cpus) : std::string("one per core")),
                   "export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1"});
  }
}

void check_memory(const HostInfo& host, std::vector<Finding>& out) {
  if (const auto& shm = host.memory.shm; shm && shm->total_bytes < kShmWarningBytes) {
    out.push_back(
        {"mem.shm", shm->total_bytes < kShmCriticalBytes ? Severity::kCritical : Severity::kWarning,
         fmt::format("/dev/shm is {} ({} free)", format_bytes(shm->total_bytes),
                     format_bytes(shm->free_bytes)),
         "DataLoader workers hand every batch to the trainer through /dev/shm; when it fills, "
         "workers die with \"bus error\" or \"unable to open shared memory object\".",
         "docker run --shm-size=16g ... (or --ipc=host); on a host: sudo mount -o "
         "remount,size=16G /dev/shm"});
  }
  const auto& p = host.process;
  // A trainer near its limit fails at the next batch that shares more tensors than it frees.
  const bool crowded =
      p.nofile_soft && p.open_fds && *p.nofile_soft > 0 && *p.open_fds * 10 >= *p.nofile_soft * 8;
  if (p.nofile_soft && *p.nofile_soft >= 0 && (*p.nofile_soft < kNofileLow || crowded)) {
    const int64_t hard = p.nofile_hard.value_or(kNofileWanted);
    const int64_t to = hard < 0 ? kNofileWanted : std::min(hard, kNofileWanted);
    std::string fix =
        "raise nofile in /etc/security/limits.conf, or "
        "torch.multiprocessing.set_sharing_strategy('file_system')";
    if (to > *p.nofile_soft) {
      // A running process's soft limit can be raised in place up to its hard limit.
      fix = p.pid == "self" ? fmt::format("ulimit -n {}", to)
                            : fmt::format(
                                  "prlimit --pid {} --nofile={}:   (and ulimit -n {} "
                                  "before the next run)",
                                  p.pid, to, to);
    }
    const bool near = crowded && *p.open_fds * 10 >= *p.nofile_soft * 9;
    out.push_back(
        {"proc.nofile", near ? Severity::kCritical : Severity::kWarning,
         fmt::format("open-files limit is {} (hard {}){}", *p.nofile_soft,
                     hard < 0 ? std::string("unlimited") : fmt::format("{}", hard),
                     p.open_fds ? fmt::format("; {} in use by {}", *p.open_fds, process_label(p))
                                : std::string()),
         "Each tensor a worker shares is an open file descriptor until it is consumed; "
         "at the limit training fails with \"received 0 items of ancdata\".",
         fix});
  }
  const auto& m = host.memory;
  if (m.overcommit_memory == 2) {
    out.push_back(
        {"mem.overcommit_strict", Severity::kWarning,
         fmt::format("vm.overcommit_memory=2: committed memory may not exceed {}",
                     m.commit_limit_bytes ? format_bytes(*m.commit_limit_bytes) : "the limit"),
         "Under strict overcommit every fork is charged the parent's private memory, so "
         "DataLoader workers of a training process that holds a large Dataset fail with "
         "\"Cannot allocate memory\" although free RAM looks ample. `trainfit loader` predicts "
         "the charge from a probe of the Dataset.",
         "python3 -m trainfit.loader --dataset MODULE:FACTORY --out loader.json; trainfit loader "
         "--profile loader.json ...; or sudo sysctl -w vm.overcommit_memory=0"});
  }
  if (m.total_bytes && m.available_bytes && *m.available_bytes * 10 < *m.total_bytes) {
    out.push_back({"mem.available", Severity::kWarning,
                   fmt::format("only {} of {} RAM available", format_bytes(*m.available_bytes),
                               format_bytes(*m.total_bytes)),
                   "Every DataLoader worker can grow toward the size of the parent process; with "
                   "little RAM left the kernel kills a worker or the trainer.",
                   "lower num_workers or free memory before training"});
  }
}

bool busy(const GpuStatus& g) {
  return g.util_gpu_pct.value_or(0) >= kLoadedUtilPct || !g.processes.empty();
}

void check_gpus(const GpuReport& report, std::vector<Finding>& out) {
  if (!report.error.empty()) {
    out.push_back({"gpu.nvml", Severity::kInfo,
                   fmt::format("GPU: not available ({})", report.error),
                   "Without NVML trainfit cannot read the GPU; the CPU checks still apply.", ""});
    return;
  }
  for (const GpuStatus& g : report.gpus) {
    const std::string gpu = fmt::format("GPU {}", g.index);
    if (g.persistence.has_value() && !*g.persistence) {
      out.push_back({"gpu.persistence", Severity::kInfo,
                     fmt::format("{}: persistence mode is off", gpu),
                     "The driver unloads when the last process exits, so each new run waits "
                     "seconds longer to start CUDA.",
                     fmt::format("sudo nvidia-smi -i {} -pm 1", g.index)});
    }
    if (g.power_limit_w && g.power_default_limit_w &&
        *g.power_limit_w < *g.power_default_limit_w * kPowerCapShare) {
      out.push_back(
          {"gpu.power_limit", Severity::kWarning,
           fmt::format("{}: power limit {:.0f} W, below the default {:.0f} W", gpu,
                       *g.power_limit_w, *g.power_default_limit_w),
           "A lowered limit makes the GPU drop its clocks under load, so each step "
           "takes longer.",
           fmt::format("sudo nvidia-smi -i {} -pl {:.0f}", g.index, *g.power_default_limit_w)});
    }
    const uint64_t reasons = g.throttle_reasons.value_or(0);
    const uint64_t hard = kThrottleHwSlowdown | kThrottleHwThermal | kThrottleHwPowerBrake;
    if ((reasons & (hard | kThrottleSwThermal)) != 0) {
      out.push_back({"gpu.throttle",
                     (reasons & hard) != 0 ? Severity::kCritical : Severity::kWarning,
                     fmt::format("{}: clocks throttled ({}), SM {} of {} MHz", gpu,
                                 throttle_reason_names(reasons), g.sm_mhz.value_or(0),
                                 g.sm_max_mhz.value_or(0)),
                     "Thermal or hardware slowdown cuts the clocks whatever the workload; check "
                     "cooling, fans and the power supply.",
                     fmt::format("nvidia-smi -i {} -q -d PERFORMANCE,TEMPERATURE", g.index)});
    } else if ((reasons & kThrottleSwPowerCap) != 0) {
      out.push_back({"gpu.throttle", Severity::kInfo,
                     fmt::format("{}: at its power cap, SM {} of {} MHz", gpu, g.sm_mhz.value_or(0),
                                 g.sm_max_mhz.value_or(0)),
                     "The clocks are limited by the power limit; normal under heavy load, but a "
                     "lowered limit makes it happen sooner.",
                     fmt::format("nvidia-smi -i {} -q -d POWER", g.index)});
    }
    const bool slow_link = (g.pcie_gen && g.pcie_gen_max && *g.pcie_gen < *g.pcie_gen_max) ||
                           (g.pcie_width && g.pcie_width_max && *g.pcie_width < *g.pcie_width_max);
    // Links train down at idle to save power; only a slow link under load is a finding.
    if (slow_link && busy(g)) {
      out.push_back(
          {"gpu.pcie", Severity::kWarning,
           fmt::format("{}: PCIe link Gen{} x{} under load, the card supports Gen{} x{}", gpu,
                       g.pcie_gen.value_or(0), g.pcie_width.value_or(0), g.pcie_gen_max.value_or(0),
                       g.pcie_width_max.value_or(0)),
           "Host-to-device copies of every batch get a fraction of the bandwidth; the "
           "card may sit in a slot wired for fewer lanes or a riser.",
           fmt::format("nvidia-smi -i {} -q -d PCIE   (then reseat or move the card)", g.index)});
    }
  }
}

}  // namespace

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "info";
}

std::string governor_fix() {
  return "sudo cpupower frequency-set -g performance   (or: sudo tuned-adm profile "
         "latency-performance)";
}

std::string idle_states_fix() {
  return fmt::format(
      "sudo cpupower idle-set -D {}   (or: sudo tuned-adm profile latency-performance)",
      kDeepIdleLatencyUs / 2);
}

std::string governor_summary(const CpuInfo& cpu) {
  if (cpu.policies.empty()) return "not available (no cpufreq)";
  std::string out;
  for (const auto& [key, count] : governor_groups(cpu)) {
    const auto& [driver, governor, epp] = key;
    std::string mode;
    if (driver == "intel_pstate" && !cpu.intel_pstate_status.empty()) {
      mode = fmt::format(" ({})", cpu.intel_pstate_status);
    } else if (driver.rfind("amd-pstate", 0) == 0 && !cpu.amd_pstate_status.empty()) {
      mode = fmt::format(" ({})", cpu.amd_pstate_status);
    }
    if (!out.empty()) out += "; ";
    out += fmt::format("{}{}, {}{} on {} polic{}", driver, mode, governor,
                       epp.empty() ? "" : fmt::format(", EPP {}", epp), count,
                       count == 1 ? "y" : "ies");
  }
  return out;
}

std::vector<Finding> diagnose(const HostInfo& host, const GpuReport& gpus) {
  std::vector<Finding> out;
  check_governor(host.cpu, out);
  check_turbo_and_caps(host.cpu, out);
  check_topology(host, out);
  check_idle(host.cpu, out);
  check_threads(host, out);
  check_memory(host, out);
  check_gpus(gpus, out);
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return static_cast<int>(a.severity) > static_cast<int>(b.severity);
  });
  return out;
}

}  // namespace trainfit
