// Replays an event list exactly (no allocator), checking that every buffer is allocated before
// it is freed and at most once at a time, for the lowering stage's tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

#include "lower/events.h"

namespace trainfit {

// Exact bytes live after every event, with the peak per phase.
struct Replayed {
  int64_t peak = 0;
  Phase peak_phase = Phase::kSetup;
  std::array<int64_t, 4> phase_peak{};
  std::array<int64_t, kCategoryCount> live_at_end{};
};

inline Replayed replay(const EventList& list) {
  Replayed r;
  std::vector<bool> live(list.buffers.size(), false);
  int64_t bytes = 0;
  for (const Event& e : list.events) {
    const Buffer& b = list.buffers[e.buffer];
    EXPECT_NE(live[static_cast<size_t>(e.buffer)], e.alloc)
        << "buffer " << e.buffer << (e.alloc ? " allocated twice" : " freed while not live");
    live[static_cast<size_t>(e.buffer)] = e.alloc;
    bytes += e.alloc ? b.bytes : -b.bytes;
    r.live_at_end[static_cast<size_t>(b.category)] += e.alloc ? b.bytes : -b.bytes;
    auto& pp = r.phase_peak[static_cast<size_t>(e.phase)];
    pp = std::max(pp, bytes);
    if (bytes > r.peak) {
      r.peak = bytes;
      r.peak_phase = e.phase;
    }
  }
  return r;
}

}  // namespace trainfit
