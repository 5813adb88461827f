// The fixed-rate loop probe behind `trainfit latency`: at each rate, sleep to an absolute
// deadline, note how late the wake-up was, run a fixed CPU work unit and time it. The same work
// taking longer at a lower rate is the symptom of a governor that lowers the clock while the
// loop sleeps; wake-ups later at a lower rate point at deep idle states.
//
//   MonotonicClock clock;
//   WorkUnit work = WorkUnit::calibrate(clock, 5.0);        // ~5 ms at full clock
//   LoopHooks hooks{[&] { work.run(); }, mhz_probe};
//   RateResult r30 = run_rate(clock, 30.0, 10 * kNsPerSecond, hooks);
//   std::vector<Finding> verdict = judge_latency({r30, r60}, cpu);
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "host/doctor.h"
#include "host/loop_clock.h"
#include "host/stats.h"

namespace trainfit {

struct RateResult {
  double rate_hz = 0;
  int64_t frames = 0;
  int64_t missed = 0;             // periods skipped because a frame overran its deadline
  Percentiles lateness_us;        // wake-up time minus the deadline
  Percentiles work_ms;            // time of the fixed work unit
  std::optional<double> cpu_mhz;  // mean clock of the loop's CPU right after its work
};

struct LoopHooks {
  std::function<void()> work;                      // the fixed work unit
  std::function<std::optional<double>()> cpu_mhz;  // the loop's CPU clock now, if known
};

// Runs one rate for `duration_ns` (at least one frame). Deadlines advance by whole periods; a
// frame that overruns skips the periods it missed, as cyclictest does.
RateResult run_rate(LoopClock& clock, double rate_hz, int64_t duration_ns, const LoopHooks& hooks);

// A fixed amount of dependent integer work, so its time tracks the CPU clock.
class WorkUnit {
 public:
  explicit WorkUnit(int64_t iterations) : iterations_(iterations) {}
  // Spins for a moment so the clock ramps up, then sizes the unit to take `ms` at that clock.
  static WorkUnit calibrate(LoopClock& clock, double ms);
  void run() const;
  int64_t iterations() const { return iterations_; }

 private:
  int64_t iterations_;
};

// Compares the rates (lowest against highest) and says what the numbers show: the seed's
// symptom with its likely cause and fix, late wake-ups, work that does not fit its period, or
// no penalty.
std::vector<Finding> judge_latency(const std::vector<RateResult>& rates, const CpuInfo& cpu);

}  // namespace trainfit
