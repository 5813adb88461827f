// The DataLoader plan: from a loader profile (what the probe measured of the Dataset on this
// host) and the rate the GPU consumes samples, the settings that feed it and what they cost the
// host, with a warning and a fix for each limit that would end the run.
//
//   LoaderRequest r{.batch = 32, .step_time_s = 0.080};
//   Result<LoaderPlan> plan = plan_loader(profile, r);
//   plan->num_workers; plan->loader_samples_per_s; plan->memory.host_ram_bytes; plan->warnings
//
// Throughput: the probe's measured samples/s at each worker count it ran, interpolated between
// them and scaled by the cores beyond the last, corrected for a batch size other than the
// probe's. The chosen count is the smallest that delivers the GPU's rate with 10% headroom,
// else the fastest. Memory (PSS, as the kernel counts it): the main process + per worker its
// private memory at start and the pages of the Dataset's Python objects it copies by reading
// them (fork), or its pickled copy of the Dataset (spawn, forkserver) + the batches in flight
// in /dev/shm + the pinned copies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "sources/loader/loader_profile.h"

namespace trainfit {

// Settings the user runs with: judged instead of chosen.
struct LoaderSettings {
  std::optional<int64_t> num_workers;
  std::optional<int64_t> prefetch_factor;
  std::optional<bool> pin_memory;
  std::optional<bool> persistent_workers;
};

// The host the run will have, where it differs from the one the probe ran on (a container with
// Docker's 64 MB /dev/shm, a job's memory limit, fewer cores).
struct HostOverrides {
  std::optional<int64_t> shm_bytes;
  std::optional<int64_t> memory_limit_bytes;  // as a cgroup's memory.max
  std::optional<int64_t> commit_limit_bytes;  // as vm.overcommit_memory=2's CommitLimit
  std::optional<int64_t> cpus;
};

struct LoaderRequest {
  int64_t batch = 1;
  double step_time_s = 0;      // the GPU's time per batch of `batch` (one optimizer step)
  std::string step_time_from;  // "given", or the model and GPU that predicted it
  LoaderSettings given;
  HostOverrides host;
};

// Samples per second the loader delivers at one worker count.
struct WorkerPoint {
  int64_t num_workers = 0;
  double samples_per_s = 0;
  bool measured = false;  // a probe run at this count (else interpolated or scaled)
};

struct LoaderMemory {
  int64_t main_bytes = 0;        // the main process's PSS with the Dataset built
  int64_t worker_own_bytes = 0;  // a worker's own private memory (USS), Dataset copies aside
  int64_t copyable_bytes = 0;    // the Dataset's Python objects: what a worker may copy
  int64_t worker_copy_first_epoch_bytes = 0;  // per worker, after the first epoch
  int64_t worker_copy_bytes = 0;              // per worker, over the whole run
  int64_t batch_bytes = 0;                    // one batch's storages
  int64_t batches_in_flight = 0;              // prefetched (prefetch_factor x num_workers) + held
  int64_t shm_bytes = 0;                      // /dev/shm at most
  int64_t pinned_bytes = 0;                   // page-locked, kept at its peak by the host allocator
  int64_t host_ram_bytes = 0;                 // all of the above over the run (PSS)
  int64_t host_ram_first_epoch_bytes = 0;
  int64_t open_fds = 0;  // main process, with batches in flight
  int64_t maps = 0;
  int64_t fork_commit_bytes = 0;  // Committed_AS after the forks (overcommit mode 2)
};

struct LoaderWarning {
  std::string code;     // stable: loader_bottleneck, host_ram, cgroup_memory, commit_limit, ...
  std::string message;  // what will happen, with the numbers
  std::string fix;      // what to change
};

struct LoaderPlan {
  bool chosen = true;  // false: the user's settings, judged
  int64_t num_workers = 0;
  std::optional<int64_t> prefetch_factor;  // none with 0 workers (PyTorch refuses one)
  bool pin_memory = true;
  bool persistent_workers = false;
  std::string start_method;
  std::vector<std::pair<std::string, std::string>> env;  // variables to set before the run
  int64_t batch = 0;
  double step_time_s = 0;
  std::string step_time_from;
  double gpu_samples_per_s = 0;
  double loader_samples_per_s = 0;
  double receive_s = 0;      // the main process's time to take a batch from a worker
  double samples_per_s = 0;  // what training gets: the slower of the two (0 workers: in series)
  std::string bottleneck;    // "loader" | "gpu"
  std::optional<double> epoch_s;
  int64_t usable_cores = 1;
  std::vector<WorkerPoint> curve;  // 0 .. the cores, and the count judged
  LoaderMemory memory;
  std::vector<LoaderWarning> warnings;
};

Result<LoaderPlan> plan_loader(const LoaderProfile& profile, const LoaderRequest& request);

}  // namespace trainfit
