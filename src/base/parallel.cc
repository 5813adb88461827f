#include "base/parallel.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

namespace trainfit {

size_t worker_count(size_t tasks) {
  size_t threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  if (const char* env = std::getenv("TRAINFIT_THREADS")) {
    const std::string_view text(env);
    size_t cap = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), cap);
    if (error == std::errc() && end == text.data() + text.size() && cap > 0) {
      threads = std::min(threads, cap);
    }
  }
  return std::max<size_t>(1, std::min(threads, tasks));
}

void parallel_for(size_t workers, size_t tasks,
                  const std::function<void(size_t worker, size_t task)>& work) {
  std::atomic<size_t> next{0};
  const auto drain = [&](size_t worker) {
    for (size_t task = next++; task < tasks; task = next++) work(worker, task);
  };
  std::vector<std::thread> threads;
  workers = std::clamp<size_t>(workers, 1, std::max<size_t>(tasks, 1));
  threads.reserve(workers - 1);
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(drain, w);
  drain(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace trainfit
