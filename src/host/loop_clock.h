// The clock a measuring loop runs on: the monotonic clock with absolute-time sleeps, or a fake
// that tests script.
//
//   MonotonicClock clock;
//   int64_t next = clock.now_ns() + period_ns;
//   clock.sleep_until_ns(next);          // clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)
#pragma once

#include <cstdint>

namespace trainfit {

inline constexpr int64_t kNsPerSecond = 1'000'000'000;

class LoopClock {
 public:
  virtual ~LoopClock() = default;
  virtual int64_t now_ns() = 0;
  // Returns at `deadline_ns` or later; how much later is what the latency probe measures.
  virtual void sleep_until_ns(int64_t deadline_ns) = 0;
};

class MonotonicClock : public LoopClock {
 public:
  int64_t now_ns() override;
  void sleep_until_ns(int64_t deadline_ns) override;
};

}  // namespace trainfit
