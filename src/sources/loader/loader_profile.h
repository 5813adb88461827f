// A loader profile: what `python3 -m trainfit.loader` measured of a Dataset with PyTorch's own
// DataLoader on the host that trains (format "trainfit-loader-profile", version 1; the fields
// are documented in docs/loader-profile-format.md).
//
//   Result<LoaderProfile> p = parse_loader_profile(text, "loader.json");   // the file's text
//   p->fetch.mean_s; p->runs[i].samples_per_s; p->host.shm_total_bytes
//
// The parser checks every field it reads (types, ranges, sizes that cannot overflow) and names
// the first one that is wrong; a profile the probe did not finish is refused with its reason.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace trainfit {

inline constexpr std::string_view kLoaderProfileFormat = "trainfit-loader-profile";
inline constexpr int kLoaderProfileVersion = 1;

// One process's memory as /proc/PID/smaps_rollup and status count it.
struct ProcessMemory {
  int64_t rss_bytes = 0;
  int64_t pss_bytes = 0;  // shared pages split among the processes that map them
  int64_t uss_bytes = 0;  // private pages: Private_Clean + Private_Dirty
  int64_t anon_bytes = 0;
  int64_t vm_size_bytes = 0;
  int64_t vm_data_bytes = 0;  // private writable address space: what a fork charges
  std::optional<int64_t> open_fds;
  std::optional<int64_t> maps;
};

// Seconds per event over `count` events.
struct TimeSummary {
  int64_t count = 0;
  double mean_s = 0, median_s = 0, p90_s = 0, p99_s = 0, max_s = 0;
};

struct LoaderHost {
  int64_t logical_cpus = 1;
  std::vector<int> affinity;          // the CPUs the probe could run on
  int64_t physical_cores = 1;         // of those
  std::vector<int> p_cores, e_cores;  // hybrid parts only
  std::optional<int64_t> mem_total_bytes, mem_available_bytes, swap_total_bytes;
  std::optional<int64_t> commit_limit_bytes, committed_as_bytes;
  std::optional<int64_t> overcommit_memory;  // vm.overcommit_memory: 0, 1 or 2
  std::optional<int64_t> max_map_count;
  std::optional<int64_t> cgroup_memory_max_bytes, cgroup_memory_current_bytes;
  std::optional<double> cgroup_cpu_quota;  // cores
  std::optional<int64_t> shm_total_bytes, shm_free_bytes;
  std::optional<int64_t> nofile_soft, nofile_hard;
  std::optional<int64_t> address_space_limit_bytes;  // RLIMIT_AS
  std::string start_method;                          // fork | spawn | forkserver
  std::string sharing_strategy;                      // file_descriptor | file_system
  std::map<std::string, std::string> thread_env;
  bool cuda = false;
};

// What reaches from the Dataset: Python objects (their pages are copied by forked workers that
// read them) and flat buffers (NumPy arrays, tensors: shared), memory-mapped bytes.
struct DatasetInventory {
  int64_t python_objects = 0;
  int64_t python_object_bytes = 0;
  int64_t flat_buffers = 0;
  int64_t flat_buffer_bytes = 0;
  int64_t tensor_bytes = 0;  // of flat_buffer_bytes: tensors (shared memory under spawn)
  int64_t mapped_bytes = 0;
};

struct BatchProfile {
  int64_t size = 0;  // samples
  TimeSummary collate;
  std::optional<TimeSummary> pin;  // where the probe had CUDA
  int64_t tensors = 0;
  int64_t bytes = 0;
  int64_t storage_bytes = 0;  // each storage once, whole
  std::vector<int64_t> tensor_bytes;
};

struct WorkerMemory {
  std::optional<ProcessMemory> first;  // at the run's first batch
  std::optional<ProcessMemory> last;   // at its end
};

// A real DataLoader at one worker count.
struct WorkerRun {
  int64_t num_workers = 0;
  int64_t batches = 0;
  double seconds = 0;
  std::optional<double> samples_per_s;  // after the first round of batches
  std::optional<double> first_batch_s;  // from iter() to the first batch: start-up included
  std::optional<double> receive_s;      // the main process's time to take a ready batch
  std::optional<ProcessMemory> main_memory;
  std::vector<WorkerMemory> workers;
};

struct LoaderProfile {
  std::string source;   // the file, as given
  std::string dataset;  // the factory ("mypkg.data:make") or the Dataset's type
  int64_t length = 0;   // samples
  int64_t batch_size = 0;
  LoaderHost host;
  std::optional<ProcessMemory> before_dataset, after_dataset;  // around the factory
  ProcessMemory main;  // the main process with the Dataset built
  DatasetInventory inventory;
  TimeSummary fetch;  // per sample, the first time an index is read
  std::optional<TimeSummary> warm;
  int64_t sample_bytes = 0;
  BatchProfile batch;
  std::vector<WorkerRun> runs;
  std::optional<int64_t> worker_torch_threads, worker_os_threads;  // most seen in a worker
  std::string workers_skipped;  // why no worker run was made, if none was
};

Result<LoaderProfile> parse_loader_profile(std::string_view text, std::string_view source);

}  // namespace trainfit
