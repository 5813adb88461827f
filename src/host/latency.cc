#include "host/latency.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace trainfit {
namespace {

constexpr double kNsPerUs = 1e3;
constexpr double kNsPerMs = 1e6;
// The seed's symptom: the same work at least this much slower at the lower rate...
constexpr double kSlowerShare = 0.10;
// ...and by at least this much, so that timer noise on a short unit is not called a symptom.
constexpr double kSlowerMs = 0.1;
// A clock this much lower at the lower rate is the frequency governor at work.
constexpr double kLowerClockShare = 0.07;
// Wake-ups this much later (p99), and by this factor, at the lower rate point at deep idle
// states; less is timer slack and scheduling noise, and small next to a frame period.
constexpr double kLaterWakeUs = 100;
constexpr double kLaterWakeFactor = 1.5;
constexpr int64_t kCalibrationWarmupNs = 300'000'000;
constexpr int64_t kCalibrationChunk = 200'000;
constexpr int kCalibrationRounds = 7;

std::string rate_name(double hz) {
  return fmt::format("{:g} Hz", hz);
}

}  // namespace

RateResult run_rate(LoopClock& clock, double rate_hz, int64_t duration_ns, const LoopHooks& hooks) {
  const auto period_ns = static_cast<int64_t>(std::llround(kNsPerSecond / rate_hz));
  std::vector<double> late_us;
  std::vector<double> work_ms;
  std::vector<double> mhz;
  RateResult r;
  r.rate_hz = rate_hz;
  const int64_t start = clock.now_ns();
  int64_t next = start + period_ns;
  do {
    clock.sleep_until_ns(next);
    const int64_t woke = clock.now_ns();
    hooks.work();
    const int64_t done = clock.now_ns();
    late_us.push_back(static_cast<double>(woke - next) / kNsPerUs);
    work_ms.push_back(static_cast<double>(done - woke) / kNsPerMs);
    if (hooks.cpu_mhz) {
      if (std::optional<double> m = hooks.cpu_mhz()) mhz.push_back(*m);
    }
    next += period_ns;
    while (clock.now_ns() > next) {
      next += period_ns;
      ++r.missed;
    }
  } while (next - start <= duration_ns);
  r.frames = static_cast<int64_t>(late_us.size());
  r.lateness_us = percentiles(std::move(late_us));
  r.work_ms = percentiles(std::move(work_ms));
  if (!mhz.empty()) r.cpu_mhz = mean(mhz);
  return r;
}

void WorkUnit::run() const {
  // A chain of dependent multiply-adds: each step waits for the last, so the time is cycles
  // divided by the clock, and the compiler cannot fold or vectorize it away.
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (int64_t i = 0; i < iterations_; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  asm volatile("" : : "r"(x));  // the result is used: the loop must run
}

WorkUnit WorkUnit::calibrate(LoopClock& clock, double ms) {
  const WorkUnit chunk(kCalibrationChunk);
  const int64_t warm_until = clock.now_ns() + kCalibrationWarmupNs;
  while (clock.now_ns() < warm_until) chunk.run();
  double best_ns = INFINITY;
  for (int i = 0; i < kCalibrationRounds; ++i) {
    const int64_t t0 = clock.now_ns();
    chunk.run();
    best_ns = std::min(best_ns, static_cast<double>(clock.now_ns() - t0));
  }
  const double per_iteration_ns = std::max(best_ns, 1.0) / kCalibrationChunk;
  return WorkUnit(std::max<int64_t>(1, std::llround(ms * kNsPerMs / per_iteration_ns)));
}

std::vector<Finding> judge_latency(const std::vector<RateResult>& rates, const CpuInfo& cpu) {
  std::vector<Finding> out;
  for (const RateResult& r : rates) {
    const double period_ms = 1e3 / r.rate_hz;
    const bool too_big = r.work_ms.p99 > period_ms;
    if (!too_big && r.missed == 0) continue;
    out.push_back(
        {"latency.overrun", Severity::kWarning,
         fmt::format("at {} {} periods were skipped: frames overran the {:.2f} ms period (work "
                     "p99 {:.2f} ms, max {:.2f} ms)",
                     rate_name(r.rate_hz), r.missed, period_ms, r.work_ms.p99, r.work_ms.max),
         too_big ? "The work does not fit the period at this rate, whatever the power settings; "
                   "lower the rate or the work per frame."
                 : "Most frames fit; the few that overran lost the CPU to other work on this "
                   "host. Pinning the loop to a quiet core (--cpus) shows whether that is it.",
         ""});
  }
  if (rates.size() < 2) return out;
  const auto [lo_it, hi_it] = std::minmax_element(
      rates.begin(), rates.end(),
      [](const RateResult& a, const RateResult& b) { return a.rate_hz < b.rate_hz; });
  const RateResult& lo = *lo_it;
  const RateResult& hi = *hi_it;
  const double slower = lo.work_ms.p50 / hi.work_ms.p50 - 1.0;
  if (slower >= kSlowerShare && lo.work_ms.p50 - hi.work_ms.p50 >= kSlowerMs) {
    Finding f;
    f.id = "latency.rate_penalty";
    f.severity = Severity::kWarning;
    f.title = fmt::format(
        "the same work takes {:.0f}% longer at {} than at {} (p50 {:.2f} vs {:.2f} ms)",
        slower * 100, rate_name(lo.rate_hz), rate_name(hi.rate_hz), lo.work_ms.p50, hi.work_ms.p50);
    const std::string governor = governor_summary(cpu);
    if (lo.cpu_mhz && hi.cpu_mhz && *lo.cpu_mhz < *hi.cpu_mhz * (1.0 - kLowerClockShare)) {
      f.why = fmt::format(
          "The CPU ran at {:.0f} MHz while working at {} and {:.0f} MHz at {}: the governor lowers "
          "the clock while the loop sleeps longer between frames ({}).",
          *lo.cpu_mhz, rate_name(lo.rate_hz), *hi.cpu_mhz, rate_name(hi.rate_hz), governor);
    } else {
      f.why = fmt::format(
          "Most likely the CPU clocks down while the loop sleeps longer between frames ({}), or "
          "the core wakes from a deeper idle state; the clock readings here do not tell them "
          "apart.",
          governor);
    }
    if (cpu.policies.empty()) {
      f.why +=
          " This host does not expose its governor (a VM): a host with a fixed clock fixes it.";
    } else {
      f.fix = governor_fix();
    }
    out.push_back(std::move(f));
  }
  if (lo.lateness_us.p99 >= hi.lateness_us.p99 + kLaterWakeUs &&
      lo.lateness_us.p99 >= hi.lateness_us.p99 * kLaterWakeFactor) {
    Finding f{"latency.wakeup", Severity::kWarning,
              fmt::format("wake-ups are later at {} (p99 {:.0f} us) than at {} ({:.0f} us)",
                          rate_name(lo.rate_hz), lo.lateness_us.p99, rate_name(hi.rate_hz),
                          hi.lateness_us.p99),
              "Longer sleeps let the core enter deeper idle states, which take longer to exit; "
              "`--hold-dma-latency` keeps them off for the run to confirm it.",
              idle_states_fix()};
    if (cpu.idle_states.empty()) {
      f.why =
          "This host shows no idle states (a VM): the hypervisor parks an idle virtual CPU, "
          "and waking it takes longer after a longer sleep.";
      f.fix = "a VM cannot change this; for fixed-rate control use a host with a dedicated core";
    }
    out.push_back(std::move(f));
  }
  if (out.empty()) {
    out.push_back(
        {"latency.ok", Severity::kInfo,
         fmt::format("no penalty at the lower rate: work p50 {:.2f} ms at {} and {:.2f} "
                     "ms at {}",
                     lo.work_ms.p50, rate_name(lo.rate_hz), hi.work_ms.p50, rate_name(hi.rate_hz)),
         "This host keeps its clock and wakes on time between frames, so a slower loop "
         "is not slowed by power management.",
         ""});
  }
  return out;
}

}  // namespace trainfit
