// The latency probe's loop and statistics on a scripted clock, and its verdicts.
#include "host/latency.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

// Time moves only when the loop sleeps (to the deadline plus a scripted lateness) or works
// (by a scripted duration).
class FakeClock : public LoopClock {
 public:
  int64_t now_ns() override { return now_; }
  void sleep_until_ns(int64_t deadline_ns) override {
    const int64_t late = late_ns.empty() ? 0 : late_ns[sleeps_++ % late_ns.size()];
    now_ = std::max(now_, deadline_ns) + late;
  }
  void work() { now_ += work_ns.empty() ? 0 : work_ns[works_++ % work_ns.size()]; }

  std::vector<int64_t> late_ns;
  std::vector<int64_t> work_ns;

 private:
  int64_t now_ = 1'000'000'000;
  size_t sleeps_ = 0;
  size_t works_ = 0;
};

TEST(RunRate, MeasuresLatenessAndWorkOnAScriptedClock) {
  FakeClock clock;
  // 30 Hz for 1 s: 30 frames. Lateness cycles 50, 60, 70 us ... with one 900 us outlier;
  // work is 5 ms except every tenth frame at 6 ms.
  clock.late_ns = {50'000, 60'000, 70'000, 50'000, 60'000, 70'000, 50'000, 60'000, 70'000, 900'000};
  clock.work_ns = {5'000'000, 5'000'000, 5'000'000, 5'000'000, 5'000'000,
                   5'000'000, 5'000'000, 5'000'000, 5'000'000, 6'000'000};
  double mhz = 4000;
  LoopHooks hooks{[&] { clock.work(); }, [&]() -> std::optional<double> { return mhz += 10; }};
  const RateResult r = run_rate(clock, 30.0, kNsPerSecond, hooks);
  EXPECT_EQ(r.rate_hz, 30.0);
  EXPECT_EQ(r.frames, 30);
  EXPECT_EQ(r.missed, 0);
  EXPECT_DOUBLE_EQ(r.lateness_us.p50, 60);
  EXPECT_DOUBLE_EQ(r.lateness_us.p99, 900);
  EXPECT_DOUBLE_EQ(r.lateness_us.max, 900);
  EXPECT_DOUBLE_EQ(r.work_ms.p50, 5);
  EXPECT_DOUBLE_EQ(r.work_ms.p99, 6);
  ASSERT_TRUE(r.cpu_mhz.has_value());
  EXPECT_DOUBLE_EQ(*r.cpu_mhz, 4000 + 10 * 15.5);  // mean of 4010 ... 4300
}

TEST(RunRate, SkipsPeriodsAFrameOverran) {
  FakeClock clock;
  clock.work_ns = std::vector<int64_t>(16, 1'000'000);
  clock.work_ns[0] = 25'000'000;  // the first frame overruns the 16.7 ms period
  LoopHooks hooks{[&] { clock.work(); }, nullptr};
  const int64_t period_ns = 16'666'667;  // 60 Hz, rounded to the nanosecond
  // Ten periods: frames at 1, then 3 to 10 (the second deadline was missed).
  const RateResult r = run_rate(clock, 60.0, 10 * period_ns, hooks);
  EXPECT_EQ(r.missed, 1);
  EXPECT_EQ(r.frames, 9);
  EXPECT_FALSE(r.cpu_mhz.has_value());
}

// Every reading of this clock is 1 ms after the last.
class TickingClock : public LoopClock {
 public:
  int64_t now_ns() override { return now_ += 1'000'000; }
  void sleep_until_ns(int64_t deadline_ns) override { now_ = std::max(now_, deadline_ns); }

 private:
  int64_t now_ = 0;
};

TEST(WorkUnit, SizedToTheAskedTime) {
  // Each timed chunk of 200,000 iterations reads as 1 ms: 5 ns per iteration, so 5 ms of work
  // is 1,000,000 iterations.
  TickingClock clock;
  const WorkUnit unit = WorkUnit::calibrate(clock, 5.0);
  EXPECT_EQ(unit.iterations(), 1'000'000);
  unit.run();
}

RateResult rate(double hz, double work_p50, double late_p99, std::optional<double> mhz) {
  RateResult r;
  r.rate_hz = hz;
  r.frames = 100;
  r.work_ms = {work_p50, work_p50 * 1.05, work_p50 * 1.1};
  r.lateness_us = {late_p99 / 2, late_p99, late_p99 * 1.5};
  r.cpu_mhz = mhz;
  return r;
}

CpuInfo powersave_cpu() {
  CpuInfo cpu;
  CpuPolicy p;
  p.name = "policy0";
  p.driver = "intel_pstate";
  p.governor = "powersave";
  p.epp = "balance_performance";
  cpu.policies = {p};
  return cpu;
}

std::vector<std::string> verdict_ids(const std::vector<Finding>& f) {
  std::vector<std::string> ids;
  ids.reserve(f.size());
  for (const Finding& x : f) ids.push_back(x.id);
  return ids;
}

TEST(JudgeLatency, NamesTheSeedSymptomAndTheGovernor) {
  // Seed 000: 30 Hz work ~7 ms slower, the CPU at ~2.6 GHz instead of ~4.0 GHz.
  const auto f =
      judge_latency({rate(30, 12.5, 80, 2600), rate(60, 5.2, 70, 4000)}, powersave_cpu());
  ASSERT_EQ(verdict_ids(f), std::vector<std::string>{"latency.rate_penalty"});
  EXPECT_NE(f[0].title.find("140% longer at 30 Hz than at 60 Hz"), std::string::npos) << f[0].title;
  EXPECT_NE(f[0].why.find("2600 MHz"), std::string::npos) << f[0].why;
  EXPECT_NE(f[0].why.find("intel_pstate, powersave, EPP balance_performance"), std::string::npos)
      << f[0].why;
  EXPECT_EQ(f[0].fix.rfind("sudo cpupower frequency-set -g performance", 0), 0u);
}

TEST(JudgeLatency, PenaltyWithoutClockReadingsStillNamesTheLikelyCause) {
  const auto f = judge_latency({rate(60, 5.0, 70, std::nullopt), rate(30, 6.0, 80, std::nullopt)},
                               powersave_cpu());
  ASSERT_EQ(verdict_ids(f), std::vector<std::string>{"latency.rate_penalty"});
  EXPECT_NE(f[0].why.find("Most likely"), std::string::npos);
}

TEST(JudgeLatency, LateWakeUpsPointAtIdleStates) {
  CpuInfo cpu = powersave_cpu();
  cpu.idle_states = {{"POLL", 0, 0, false}, {"C1", 1, 1, false}, {"C6", 220, 600, false}};
  const auto f = judge_latency({rate(30, 5.0, 400, 4000), rate(60, 5.0, 60, 4000)}, cpu);
  ASSERT_EQ(verdict_ids(f), std::vector<std::string>{"latency.wakeup"});
  EXPECT_NE(f[0].title.find("p99 400 us"), std::string::npos) << f[0].title;
  EXPECT_NE(f[0].why.find("--hold-dma-latency"), std::string::npos) << f[0].why;
  EXPECT_EQ(f[0].fix, idle_states_fix());
  EXPECT_EQ(f[0].fix.rfind("sudo cpupower idle-set -D 10", 0), 0u) << f[0].fix;
}

TEST(JudgeLatency, LateWakeUpsOnAVmBlameTheHypervisor) {
  // No idle states exposed: nothing on this host to switch off.
  const auto f =
      judge_latency({rate(30, 5.0, 400, 4000), rate(60, 5.0, 60, 4000)}, powersave_cpu());
  ASSERT_EQ(verdict_ids(f), std::vector<std::string>{"latency.wakeup"});
  EXPECT_NE(f[0].why.find("hypervisor"), std::string::npos) << f[0].why;
  EXPECT_EQ(f[0].fix.rfind("a VM cannot change this", 0), 0u) << f[0].fix;
}

TEST(JudgeLatency, OverrunAndNoPenalty) {
  EXPECT_EQ(verdict_ids(judge_latency({rate(30, 5.0, 60, 4000), rate(60, 5.02, 60, 4000)}, {})),
            std::vector<std::string>{"latency.ok"});
  // 20 ms of work does not fit 60 Hz's 16.7 ms period.
  const auto f = judge_latency({rate(30, 20.0, 60, 4000), rate(60, 20.0, 60, 4000)}, {});
  EXPECT_EQ(verdict_ids(f), std::vector<std::string>{"latency.overrun"});
  EXPECT_NE(f[0].title.find("60 Hz"), std::string::npos);
  // A small difference on a tiny unit is noise, not a symptom.
  EXPECT_EQ(verdict_ids(judge_latency({rate(30, 0.30, 60, 4000), rate(60, 0.25, 60, 4000)}, {})),
            std::vector<std::string>{"latency.ok"});
}

}  // namespace
}  // namespace trainfit
