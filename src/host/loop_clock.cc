#include "host/loop_clock.h"

#include <cerrno>
#include <ctime>

namespace trainfit {

int64_t MonotonicClock::now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSecond + ts.tv_nsec;
}

void MonotonicClock::sleep_until_ns(int64_t deadline_ns) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(deadline_ns / kNsPerSecond);
  ts.tv_nsec = static_cast<long>(deadline_ns % kNsPerSecond);
  // Absolute sleeps, as cyclictest does: a signal that interrupts one simply restarts it.
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace trainfit
