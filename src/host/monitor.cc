#include "host/monitor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "host/host_info.h"
#include "host/stats.h"

namespace trainfit {
namespace {

constexpr int kMinDips = 3;
// Drops this regular (standard deviation of the gaps over their mean) count as periodic.
constexpr double kMaxGapVariation = 0.35;
// A process must be on the GPU in at least this share of the samples.
constexpr double kMinProcessShare = 0.5;
constexpr double kSaturatedCpuPct = 85;
constexpr int64_t kStopCheckNs = 100'000'000;

const GpuStatus* gpu_of(const MonitorSample& s, int gpu) {
  for (const GpuStatus& g : s.gpus) {
    if (g.index == gpu) return &g;
  }
  return nullptr;
}

}  // namespace

std::optional<CpuTimes> read_cpu_times(const HostFs& fs) {
  std::optional<std::string> stat = fs.read("/proc/stat");
  if (!stat || stat->rfind("cpu ", 0) != 0) return std::nullopt;
  std::istringstream words(stat->substr(4, stat->find('\n') - 4));
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  int64_t v[8] = {};
  for (int64_t& x : v) {
    if (!(words >> x) || x < 0) return std::nullopt;
  }
  CpuTimes t;
  for (int64_t x : v) t.total += x;
  t.busy = t.total - v[3] - v[4];
  return t;
}

MonitorSampler::MonitorSampler(HostFs fs, const Nvml* nvml) : fs_(std::move(fs)), nvml_(nvml) {
  online_ = read_online_cpus(fs_);
  last_ = read_cpu_times(fs_);
}

MonitorSample MonitorSampler::sample(double t_s) {
  MonitorSample s;
  s.t_s = t_s;
  if (nvml_ != nullptr) {
    for (int i = 0; i < nvml_->device_count(); ++i) s.gpus.push_back(nvml_->read(i));
  }
  const std::vector<double> mhz = read_cpu_mhz(fs_, online_);
  if (!mhz.empty()) s.cpu_mhz = mean(mhz);
  std::optional<CpuTimes> now = read_cpu_times(fs_);
  if (now && last_ && now->total > last_->total) {
    s.cpu_util_pct = 100.0 * static_cast<double>(now->busy - last_->busy) /
                     static_cast<double>(now->total - last_->total);
  }
  last_ = now;
  if (std::optional<std::string> meminfo = fs_.read("/proc/meminfo")) {
    s.ram_total_bytes = meminfo_bytes(*meminfo, "MemTotal");
    std::optional<int64_t> available = meminfo_bytes(*meminfo, "MemAvailable");
    if (s.ram_total_bytes && available) s.ram_used_bytes = *s.ram_total_bytes - *available;
  }
  return s;
}

std::vector<MonitorSample> run_monitor(MonitorSampler& sampler, LoopClock& clock,
                                       int64_t interval_ns, int64_t duration_ns,
                                       const std::atomic<bool>& stop,
                                       const std::function<void(const MonitorSample&)>& on_sample) {
  std::vector<MonitorSample> samples;
  const int64_t start = clock.now_ns();
  for (int64_t next = start + interval_ns; duration_ns == 0 || next - start <= duration_ns;
       next += interval_ns) {
    // Sleep in short steps so that Ctrl-C ends the run within a tenth of a second.
    for (int64_t t = clock.now_ns(); t < next && !stop.load(); t = clock.now_ns()) {
      clock.sleep_until_ns(std::min(next, t + kStopCheckNs));
    }
    if (stop.load()) break;
    samples.push_back(sampler.sample(static_cast<double>(clock.now_ns() - start) / kNsPerSecond));
    if (on_sample) on_sample(samples.back());
  }
  return samples;
}

std::optional<PeriodicIdle> find_periodic_idle(const std::vector<MonitorSample>& samples, int gpu) {
  std::vector<double> util;
  std::vector<double> t;
  std::vector<std::optional<double>> cpu;
  int with_process = 0;
  for (const MonitorSample& s : samples) {
    const GpuStatus* g = gpu_of(s, gpu);
    if (g == nullptr || !g->util_gpu_pct) continue;
    util.push_back(*g->util_gpu_pct);
    t.push_back(s.t_s);
    cpu.push_back(s.cpu_util_pct);
    if (!g->processes.empty()) ++with_process;
  }
  if (util.empty() || with_process < kMinProcessShare * static_cast<double>(util.size())) {
    return std::nullopt;
  }
  PeriodicIdle found;
  found.gpu = gpu;
  std::vector<double> dip_starts;
  std::vector<double> cpu_at_dips;
  double busy_sum = 0;
  int idle = 0;
  for (size_t i = 0; i < util.size(); ++i) {
    if (util[i] <= kIdleUtilPct) {
      ++idle;
      if (cpu[i]) cpu_at_dips.push_back(*cpu[i]);
      if (i > 0 && util[i - 1] >= kBusyUtilPct) dip_starts.push_back(t[i]);
    } else {
      busy_sum += util[i];
    }
  }
  found.dips = static_cast<int>(dip_starts.size());
  if (found.dips < kMinDips) return std::nullopt;
  std::vector<double> gaps;
  for (size_t i = 1; i < dip_starts.size(); ++i) gaps.push_back(dip_starts[i] - dip_starts[i - 1]);
  const double period = mean(gaps);
  double var = 0;
  for (double g : gaps) var += (g - period) * (g - period);
  const double spread = std::sqrt(var / static_cast<double>(gaps.size()));
  if (period <= 0 || spread / period > kMaxGapVariation) return std::nullopt;
  found.period_s = period;
  found.idle_share = static_cast<double>(idle) / static_cast<double>(util.size());
  const auto busy_count = static_cast<double>(util.size()) - idle;
  found.busy_util_pct = busy_count > 0 ? busy_sum / busy_count : 0;
  if (!cpu_at_dips.empty()) found.cpu_util_at_dips_pct = mean(cpu_at_dips);
  return found;
}

std::vector<Finding> judge_monitor(const std::vector<MonitorSample>& samples, size_t cpus) {
  std::vector<Finding> out;
  if (samples.empty()) return out;
  for (const GpuStatus& g : samples.back().gpus) {
    std::optional<PeriodicIdle> p = find_periodic_idle(samples, g.index);
    if (!p) continue;
    Finding f;
    f.id = "gpu.starved";
    f.severity = Severity::kWarning;
    f.title = fmt::format(
        "GPU {} dropped to idle {} times, about every {:.1f} s, idle {:.0f}% of the time "
        "while a process trains on it: it is probably waiting for data",
        g.index, p->dips, p->period_s, p->idle_share * 100);
    f.why =
        "A GPU that idles at a steady rhythm is fed by a DataLoader that cannot keep up: "
        "with N workers it runs about N steps, then waits for the next batch. More workers "
        "(up to one per CPU, less one for the trainer) close the gap.";
    const bool saturated = p->cpu_util_at_dips_pct && *p->cpu_util_at_dips_pct >= kSaturatedCpuPct;
    if (saturated) {
      f.why += fmt::format(
          " The CPUs were {:.0f}% busy during the drops, so more workers will "
          "not help: make decoding and augmentation cheaper, or move them to "
          "the GPU.",
          *p->cpu_util_at_dips_pct);
    }
    // One CPU stays with the training process itself.
    f.fix = fmt::format(
        "measure the Dataset and plan the loader: python3 -m trainfit.loader --dataset "
        "MODULE:FACTORY --batch N --out loader.json, then trainfit loader --profile loader.json "
        "--step-time STEP --batch N (STEP: a training step without waiting for data, e.g. "
        "80ms; or the model and --gpu) for the workers, prefetch and host RAM; as a first try "
        "DataLoader(..., num_workers={}, persistent_workers=True, pin_memory=True) with "
        "OMP_NUM_THREADS=1",
        cpus > 1 ? cpus - 1 : 1);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace trainfit
