#include "base/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace trainfit {
namespace {

TEST(Parallel, EveryTaskRunsOnceOnAWorkerInRange) {
  for (const size_t tasks : {size_t{2}, size_t{3}, size_t{1000}}) {
    std::vector<std::atomic<int>> runs(tasks);
    std::vector<std::atomic<size_t>> ran_on(tasks);
    parallel_for(tasks, [&](size_t worker, size_t task) {
      ++runs[task];
      ran_on[task] = worker;
    });
    for (size_t t = 0; t < tasks; ++t) {
      EXPECT_EQ(runs[t], 1) << "task " << t;
      EXPECT_LT(ran_on[t], worker_limit()) << "task " << t;
    }
  }
}

TEST(Parallel, NoTasksAndOneTask) {
  int runs = 0;
  parallel_for(0, [&](size_t, size_t) { ++runs; });
  EXPECT_EQ(runs, 0);
  parallel_for(1, [&](size_t worker, size_t) {
    EXPECT_EQ(worker, 0u);  // a single task runs on the calling thread
    ++runs;
  });
  EXPECT_EQ(runs, 1);
}

// Work inside work is shared with the same pool: never more threads at once than the limit,
// and every inner task runs.
TEST(Parallel, NestedWorkNeverRunsMoreThreadsThanTheLimit) {
  std::atomic<size_t> running{0};
  std::atomic<size_t> most{0};
  std::atomic<size_t> inner_runs{0};
  parallel_for(8, [&](size_t, size_t) {
    parallel_for(8, [&](size_t, size_t) {
      const size_t now = ++running;
      size_t seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      --running;
      ++inner_runs;
    });
  });
  EXPECT_EQ(inner_runs, 64u);
  EXPECT_GE(most, 1u);
  EXPECT_LE(most, worker_limit());
  EXPECT_LE(idle_workers(), worker_limit() - 1);
}

TEST(Parallel, TheLimitIsTheHardwareThreads) {
  EXPECT_GE(worker_limit(), 1u);
  EXPECT_LE(worker_limit(), std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace trainfit
