// What `trainfit monitor` samples every interval (GPU as nvidia-smi dmon shows it, plus CPU clock,
// CPU utilization and RAM), and how it spots a GPU that periodically drops to idle while a
// process trains on it: the signature of a data loader that cannot keep up.
//
//   MonitorSampler sampler(HostFs("/"), nvml);       // nvml may be null: CPU columns only
//   std::vector<MonitorSample> rows = run_monitor(sampler, clock, interval_ns, duration_ns,
//                                                 stop, [](const MonitorSample& s) { print(s); });
//   std::vector<Finding> found = judge_monitor(rows, cpus);
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <vector>

#include "host/doctor.h"
#include "host/host_fs.h"
#include "host/loop_clock.h"
#include "host/nvml.h"

namespace trainfit {

// The "cpu" line of /proc/stat, in clock ticks.
struct CpuTimes {
  int64_t busy = 0;
  int64_t total = 0;
};
std::optional<CpuTimes> read_cpu_times(const HostFs& fs);

struct MonitorSample {
  double t_s = 0;                         // since the start
  std::vector<GpuStatus> gpus;            // empty without NVML
  std::optional<double> cpu_mhz;          // mean over online CPUs
  std::optional<double> cpu_util_pct;     // since the previous sample
  std::optional<int64_t> ram_used_bytes;  // MemTotal - MemAvailable
  std::optional<int64_t> ram_total_bytes;
};

class MonitorSampler {
 public:
  MonitorSampler(HostFs fs, const Nvml* nvml);
  MonitorSample sample(double t_s);
  const std::vector<int>& online() const { return online_; }  // the CPUs it averages

 private:
  HostFs fs_;
  const Nvml* nvml_;
  std::vector<int> online_;
  std::optional<CpuTimes> last_;
};

// Samples every `interval_ns` for `duration_ns` (0: until `stop` is set), calling `on_sample`
// as each row is taken. The first sample is taken one interval after the start, so that CPU
// utilization covers a whole interval.
std::vector<MonitorSample> run_monitor(MonitorSampler& sampler, LoopClock& clock,
                                       int64_t interval_ns, int64_t duration_ns,
                                       const std::atomic<bool>& stop,
                                       const std::function<void(const MonitorSample&)>& on_sample);

// A GPU whose utilization drops to idle at a steady rhythm while a process runs on it.
struct PeriodicIdle {
  int gpu = 0;
  int dips = 0;              // drops from busy to idle
  double period_s = 0;       // mean time between drops
  double idle_share = 0;     // share of samples at idle
  double busy_util_pct = 0;  // mean utilization when not idle
  std::optional<double> cpu_util_at_dips_pct;
};

inline constexpr int kBusyUtilPct = 60;  // a GPU at or above this is working
inline constexpr int kIdleUtilPct = 20;  // at or below this it waits

std::optional<PeriodicIdle> find_periodic_idle(const std::vector<MonitorSample>& samples, int gpu);

// Findings over a whole run: a data-starved GPU, with the loader settings to try.
std::vector<Finding> judge_monitor(const std::vector<MonitorSample>& samples, size_t cpus);

}  // namespace trainfit
