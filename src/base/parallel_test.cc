#include "base/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

namespace trainfit {
namespace {

TEST(Parallel, EveryTaskRunsOnceOnAWorkerInRange) {
  for (const size_t workers : {size_t{1}, size_t{2}, size_t{7}}) {
    constexpr size_t kTasks = 1000;
    std::vector<std::atomic<int>> runs(kTasks);
    std::vector<std::atomic<size_t>> ran_on(kTasks);
    parallel_for(workers, kTasks, [&](size_t worker, size_t task) {
      ++runs[task];
      ran_on[task] = worker;
    });
    for (size_t t = 0; t < kTasks; ++t) {
      EXPECT_EQ(runs[t], 1) << "task " << t;
      EXPECT_LT(ran_on[t], workers) << "task " << t;
    }
  }
}

TEST(Parallel, NoTasksAndMoreWorkersThanTasks) {
  int runs = 0;
  parallel_for(4, 0, [&](size_t, size_t) { ++runs; });
  EXPECT_EQ(runs, 0);
  std::atomic<int> one{0};
  parallel_for(8, 1, [&](size_t worker, size_t) {
    EXPECT_EQ(worker, 0u);  // a single task runs on the calling thread
    ++one;
  });
  EXPECT_EQ(one, 1);
}

TEST(Parallel, WorkerCountIsCappedByTasksAndTheEnvironment) {
  EXPECT_EQ(worker_count(0), 1u);
  EXPECT_EQ(worker_count(1), 1u);
  EXPECT_LE(worker_count(1000), std::max(1u, std::thread::hardware_concurrency()));
  ::setenv("TRAINFIT_THREADS", "1", 1);
  EXPECT_EQ(worker_count(1000), 1u);
  ::setenv("TRAINFIT_THREADS", "zero", 1);  // not a count: ignored
  EXPECT_EQ(worker_count(1000), std::min<size_t>(1000, std::max(1u, std::thread::hardware_concurrency())));
  ::unsetenv("TRAINFIT_THREADS");
}

}  // namespace
}  // namespace trainfit
