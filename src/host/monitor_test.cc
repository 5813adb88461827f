// The monitor's sampling loop against the fake NVML, and its periodic-idle detector.
#include "host/monitor.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace trainfit {
namespace {

class FakeClock : public LoopClock {
 public:
  int64_t now_ns() override { return now_; }
  void sleep_until_ns(int64_t deadline_ns) override { now_ = std::max(now_, deadline_ns); }

 private:
  int64_t now_ = 0;
};

std::vector<MonitorSample> series(const std::vector<int>& util, bool process = true,
                                  double cpu_pct = 40) {
  std::vector<MonitorSample> out;
  for (size_t i = 0; i < util.size(); ++i) {
    MonitorSample s;
    s.t_s = static_cast<double>(i + 1);
    s.cpu_util_pct = cpu_pct;
    GpuStatus g;
    g.util_gpu_pct = util[i];
    if (process) g.processes.push_back({1234, int64_t{1} << 30});
    s.gpus.push_back(g);
    out.push_back(s);
  }
  return out;
}

TEST(PeriodicIdle, FindsARegularDrop) {
  const auto found =
      find_periodic_idle(series({95, 97, 96, 2, 95, 97, 96, 0, 94, 98, 97, 5, 96}), 0);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->dips, 3);
  EXPECT_DOUBLE_EQ(found->period_s, 4.0);
  EXPECT_NEAR(found->idle_share, 3.0 / 13, 1e-12);
  EXPECT_NEAR(found->busy_util_pct, 96.1, 0.05);
  EXPECT_DOUBLE_EQ(*found->cpu_util_at_dips_pct, 40);
}

TEST(PeriodicIdle, IgnoresWhatIsNotStarvation) {
  // Busy throughout.
  EXPECT_FALSE(find_periodic_idle(series({95, 97, 96, 94, 95, 97, 96, 95}), 0));
  // Idle with no process: nothing is training.
  EXPECT_FALSE(find_periodic_idle(series({95, 2, 95, 2, 95, 2, 95, 2}, false), 0));
  // Drops at irregular times (gaps 2, 7, 2 s).
  EXPECT_FALSE(find_periodic_idle(series({95, 2, 95, 2, 95, 95, 95, 95, 95, 95, 2, 95, 2}), 0));
  // Only two drops.
  EXPECT_FALSE(find_periodic_idle(series({95, 95, 2, 95, 95, 2, 95}), 0));
  // One long idle stretch (the job ended).
  EXPECT_FALSE(find_periodic_idle(series({95, 95, 95, 0, 0, 0, 0, 0, 0}), 0));
  // Another GPU index.
  EXPECT_FALSE(find_periodic_idle(series({95, 2, 95, 2, 95, 2, 95, 2}), 1));
}

TEST(PeriodicIdle, SaturatedCpusChangeTheAdvice) {
  const auto relaxed = judge_monitor(series({95, 97, 96, 2, 95, 97, 96, 0, 94, 98, 97, 5}), 16);
  ASSERT_EQ(relaxed.size(), 1u);
  EXPECT_EQ(relaxed[0].id, "gpu.starved");
  EXPECT_NE(relaxed[0].fix.find("num_workers=15"), std::string::npos) << relaxed[0].fix;
  EXPECT_EQ(relaxed[0].why.find("more workers will not help"), std::string::npos);
  const auto busy =
      judge_monitor(series({95, 97, 96, 2, 95, 97, 96, 0, 94, 98, 97, 5}, true, 97), 16);
  ASSERT_EQ(busy.size(), 1u);
  EXPECT_NE(busy[0].why.find("more workers will not help"), std::string::npos);
}

TEST(Monitor, DetectsThePlantedIdlePatternThroughTheFakeNvml) {
  setenv("FAKE_NVML_SCENARIO", "starved", 1);
  NvmlOpen nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  ASSERT_TRUE(nvml.nvml) << nvml.error;
  MonitorSampler sampler(HostFs("/"), nvml.nvml.get());
  FakeClock clock;
  std::atomic<bool> stop{false};
  int printed = 0;
  const std::vector<MonitorSample> samples =
      run_monitor(sampler, clock, kNsPerSecond, 20 * kNsPerSecond, stop,
                  [&](const MonitorSample&) { ++printed; });
  ASSERT_EQ(samples.size(), 20u);
  EXPECT_EQ(printed, 20);
  EXPECT_DOUBLE_EQ(samples[0].t_s, 1.0);
  EXPECT_DOUBLE_EQ(samples[19].t_s, 20.0);
  ASSERT_EQ(samples[3].gpus.size(), 1u);
  EXPECT_EQ(samples[3].gpus[0].util_gpu_pct, 3);  // the fake's pattern: 96, 97, 95, 3
  EXPECT_TRUE(samples[0].ram_total_bytes.has_value());
  EXPECT_TRUE(samples[0].cpu_mhz.has_value());
  const std::vector<Finding> found = judge_monitor(samples, 8);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].id, "gpu.starved");
  EXPECT_NE(found[0].title.find("GPU 0 dropped to idle 5 times, about every 4.0 s"),
            std::string::npos)
      << found[0].title;

  setenv("FAKE_NVML_SCENARIO", "steady", 1);
  nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  ASSERT_TRUE(nvml.nvml);
  MonitorSampler steady(HostFs("/"), nvml.nvml.get());
  EXPECT_TRUE(
      judge_monitor(run_monitor(steady, clock, kNsPerSecond, 20 * kNsPerSecond, stop, {}), 8)
          .empty());
}

TEST(Monitor, CpuColumnsWithoutAGpuAndAStopFlag) {
  MonitorSampler sampler(HostFs("/"), nullptr);
  FakeClock clock;
  std::atomic<bool> stop{false};
  int n = 0;
  // Until stopped: the callback stops it after three rows.
  const auto samples =
      run_monitor(sampler, clock, kNsPerSecond / 2, 0, stop, [&](const MonitorSample&) {
        if (++n == 3) stop.store(true);
      });
  EXPECT_EQ(samples.size(), 3u);
  EXPECT_TRUE(samples[0].gpus.empty());
  EXPECT_TRUE(samples[0].ram_used_bytes.has_value());
}

TEST(Monitor, CpuColumnsFromARecordedTree) {
  // Four CPUs without cpufreq, /proc/stat moving between the start and the first sample.
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("trainfit_monitor_" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  const auto put = [&](const std::string& path, const std::string& text) {
    std::filesystem::create_directories((root / path).parent_path());
    std::ofstream(root / path) << text;
  };
  put("sys/devices/system/cpu/online", "0-3\n");
  std::string cpuinfo;
  for (int mhz : {2000, 2000, 3000, 3000}) cpuinfo += fmt::format("cpu MHz\t\t: {}.000\n\n", mhz);
  put("proc/cpuinfo", cpuinfo);
  put("proc/meminfo", "MemTotal: 8388608 kB\nMemAvailable: 6291456 kB\n");
  // user nice system idle iowait irq softirq steal: 1000 ticks, 150 busy.
  put("proc/stat", "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n");
  MonitorSampler sampler(HostFs(root.string()), nullptr);
  EXPECT_EQ(sampler.online(), (std::vector<int>{0, 1, 2, 3}));
  // 800 more ticks, 350 of them busy (iowait counts as idle).
  put("proc/stat", "cpu  400 0 100 1250 50 0 0 0 0 0\n");
  const MonitorSample s = sampler.sample(1.0);
  std::filesystem::remove_all(root);
  EXPECT_DOUBLE_EQ(s.t_s, 1.0);
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_DOUBLE_EQ(s.cpu_mhz.value_or(0), 2500);
  EXPECT_DOUBLE_EQ(s.cpu_util_pct.value_or(0), 43.75);
  EXPECT_EQ(s.ram_total_bytes, int64_t{8} << 30);
  EXPECT_EQ(s.ram_used_bytes, int64_t{2} << 30);
}

TEST(Monitor, CpuTimesFromProcStat) {
  const std::optional<CpuTimes> t = read_cpu_times(HostFs("/"));
  ASSERT_TRUE(t.has_value());
  EXPECT_GT(t->total, 0);
  EXPECT_LE(t->busy, t->total);
}

}  // namespace
}  // namespace trainfit
