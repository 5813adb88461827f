#include "base/parallel.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace trainfit {
namespace {

struct Job {
  const std::function<void(size_t, size_t)>* work = nullptr;
  size_t tasks = 0;
  std::atomic<size_t> next{0};     // the next task to hand out
  std::atomic<size_t> workers{1};  // numbers handed out: the caller is 0
  std::atomic<size_t> done{0};
  std::mutex mutex;
  std::condition_variable finished;

  // Runs tasks until none is left to start.
  void drain(size_t worker) {
    for (size_t task = next++; task < tasks; task = next++) {
      (*work)(worker, task);
      if (++done == tasks) {
        std::lock_guard<std::mutex> lock(mutex);
        finished.notify_all();
      }
    }
  }
  bool started() const { return next.load() >= tasks; }
};

// Threads started on first use, waiting for jobs with tasks not yet started.
class Pool {
 public:
  explicit Pool(size_t threads) {
    threads_.reserve(threads);
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { serve(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  size_t size() const { return threads_.size(); }
  size_t idle() const { return idle_.load(); }

  void post(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(job);
    }
    wake_.notify_all();
  }
  void retire(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase(jobs_, job);
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      --idle_;
      if (stop_) return;
      const std::shared_ptr<Job> job = jobs_.front();
      if (job->started()) {
        jobs_.pop_front();  // every task is taken: nothing here for anyone
        continue;
      }
      lock.unlock();
      job->drain(job->workers++);
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  std::atomic<size_t> idle_{0};
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

Pool& pool() {
  static Pool threads(worker_limit() - 1);
  return threads;
}

}  // namespace

size_t worker_limit() {
  size_t threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  if (const char* env = std::getenv("TRAINFIT_THREADS")) {
    const std::string_view text(env);
    size_t cap = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), cap);
    if (error == std::errc() && end == text.data() + text.size() && cap > 0) {
      threads = std::min(threads, cap);
    }
  }
  return threads;
}

size_t idle_workers() {
  return worker_limit() > 1 ? pool().idle() : 0;
}

void parallel_for(size_t tasks, const std::function<void(size_t worker, size_t task)>& work) {
  if (tasks <= 1 || worker_limit() <= 1) {
    for (size_t task = 0; task < tasks; ++task) work(0, task);
    return;
  }
  const auto job = std::make_shared<Job>();
  job->work = &work;
  job->tasks = tasks;
  pool().post(job);
  job->drain(0);
  pool().retire(job);
  std::unique_lock<std::mutex> lock(job->mutex);
  job->finished.wait(lock, [&] { return job->done.load() == tasks; });
}

}  // namespace trainfit
