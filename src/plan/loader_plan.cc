#include "plan/loader_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <map>

#include "base/units.h"

namespace trainfit {
namespace {

// The loader must deliver the GPU's rate with this headroom, for the batches that take longer.
constexpr double kHeadroom = 1.1;
// What the main process spends on each tensor a worker sends (unpickling, the descriptor, the
// mapping): about 0.25 ms, flat over batch sizes (roboflow/rf-detr#1399).
constexpr double kTensorCrossingS = 0.25e-3;
constexpr int64_t kDefaultPrefetch = 2;
constexpr int64_t kMaxPrefetch = 8;
// A forked worker's private memory at start where the probe ran none (measured: 10-20 MB).
constexpr int64_t kForkedWorkerStartBytes = int64_t{16} << 20;
// Descriptors a worker adds to the main process besides its batches (queue pipes, its process).
constexpr int64_t kFdsPerWorker = 4;
// Warn at this share of a limit.
constexpr double kNearLimit = 0.9;
constexpr double kDataSeconds = 1e-9;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

int64_t pow2_ceil(int64_t bytes) {
  return bytes <= 1 ? bytes : static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(bytes)));
}

int64_t scale(int64_t bytes, double factor) {
  return static_cast<int64_t>(std::llround(static_cast<double>(bytes) * factor));
}

int64_t usable_cores(const LoaderProfile& p, const HostOverrides& host) {
  if (host.cpus) return *host.cpus;
  auto cores = static_cast<int64_t>(p.host.affinity.size());
  if (p.host.cgroup_cpu_quota && *p.host.cgroup_cpu_quota > 0) {
    cores = std::min(cores, static_cast<int64_t>(std::ceil(*p.host.cgroup_cpu_quota)));
  }
  return std::max<int64_t>(cores, 1);
}

// Samples per second at each worker count, at the planner's batch size.
class RateModel {
 public:
  RateModel(const LoaderProfile& p, int64_t batch, int64_t cores)
      : probe_batch_(static_cast<double>(p.batch_size)),
        batch_(static_cast<double>(batch)),
        cores_(cores),
        tensors_(static_cast<double>(p.batch.tensors)),
        sample_s_(std::max(p.fetch.mean_s + p.batch.collate.mean_s / probe_batch_, kDataSeconds)) {
    for (const WorkerRun& r : p.runs) {
      if (r.samples_per_s && *r.samples_per_s > 0) measured_[r.num_workers] = *r.samples_per_s;
    }
  }

  bool measured(int64_t n) const { return measured_.contains(n); }

  double at(int64_t n) const { return at_probe_batch(n) * batch_factor(n); }

 private:
  // Samples per second of one process loading batches of `batch`, with a worker's sending cost.
  double per_process(double batch, int64_t n) const {
    const double crossing = n > 0 ? tensors_ * kTensorCrossingS : 0;
    return batch / (batch * sample_s_ + crossing);
  }
  double batch_factor(int64_t n) const {
    return per_process(batch_, n) / per_process(probe_batch_, n);
  }
  double busy(int64_t n) const { return static_cast<double>(std::min(n, cores_)); }

  double at_probe_batch(int64_t n) const {
    if (auto it = measured_.find(n); it != measured_.end()) return it->second;
    if (n == 0) return per_process(probe_batch_, 0);
    auto upper = measured_.upper_bound(n);
    auto lower = upper == measured_.begin() ? measured_.end() : std::prev(upper);
    if (lower != measured_.end() && lower->first == 0) lower = measured_.end();
    const double nd = static_cast<double>(n);
    if (lower != measured_.end() && upper != measured_.end()) {
      const double t = (nd - static_cast<double>(lower->first)) /
                       static_cast<double>(upper->first - lower->first);
      return lower->second + t * (upper->second - lower->second);
    }
    if (upper != measured_.end()) return upper->second * nd / static_cast<double>(upper->first);
    if (lower != measured_.end()) return lower->second * busy(n) / busy(lower->first);
    return per_process(probe_batch_, n) * busy(n);
  }

  double probe_batch_, batch_;
  int64_t cores_;
  double tensors_, sample_s_;
  std::map<int64_t, double> measured_;  // at the probe's batch
};

// How a worker's copies of the Dataset's pages grow: H bytes of Python objects, of which a
// worker that has read a fraction x of the samples holds H (1 - (1 - x)^s); s is how many
// samples share a page, fitted to the probe's runs (a page is copied when any of its samples
// is read).
struct CopyModel {
  int64_t heap = 0;
  double sharing = INFINITY;  // no fit: every page copied at once (the upper bound)

  int64_t after(double read_fraction) const {
    if (heap == 0 || read_fraction <= 0) return 0;
    const double f =
        std::isinf(sharing) ? 1 : 1 - std::pow(1 - std::min(read_fraction, 1.0), sharing);
    return scale(heap, f);
  }
};

CopyModel copy_model(const LoaderProfile& p) {
  CopyModel m;
  if (p.host.start_method != "fork") return m;
  int64_t heap = p.inventory.python_object_bytes;
  if (p.before_dataset && p.after_dataset) {
    const int64_t grew = p.after_dataset->anon_bytes - p.before_dataset->anon_bytes;
    heap = std::max(heap, grew - p.inventory.flat_buffer_bytes);
  }
  m.heap = std::max<int64_t>(heap, 0);
  std::vector<double> fits;
  for (const WorkerRun& r : p.runs) {
    if (r.num_workers < 1 || m.heap < (int64_t{1} << 20)) continue;
    const double read = static_cast<double>(r.batches * p.batch_size) /
                        static_cast<double>(r.num_workers) / static_cast<double>(p.length);
    if (read < 0.01 || read > 0.99) continue;
    for (const WorkerMemory& w : r.workers) {
      if (!w.first || !w.last) continue;
      const double grew = static_cast<double>(w.last->uss_bytes - w.first->uss_bytes);
      const double f = std::clamp(grew / static_cast<double>(m.heap), 0.0, 0.99);
      fits.push_back(std::log1p(-f) / std::log1p(-read));
    }
  }
  if (!fits.empty()) m.sharing = std::clamp(median(fits), 0.0, 64.0);
  return m;
}

// A worker's own private memory (its interpreter state, buffers, queues): at the end of each
// probe run, less the Dataset's pages it had copied by then.
int64_t worker_own_bytes(const LoaderProfile& p, const CopyModel& copy) {
  std::vector<double> own;
  for (const WorkerRun& r : p.runs) {
    if (r.num_workers < 1) continue;
    const double read = static_cast<double>(r.batches * p.batch_size) /
                        static_cast<double>(r.num_workers) / static_cast<double>(p.length);
    for (const WorkerMemory& w : r.workers) {
      const std::optional<ProcessMemory>& at = w.last ? w.last : w.first;
      if (!at) continue;
      own.push_back(static_cast<double>(
          std::max<int64_t>(at->uss_bytes - (w.last ? copy.after(read) : 0), 0)));
    }
  }
  if (!own.empty()) return static_cast<int64_t>(median(own));
  // Spawned workers import everything again and unpickle the Dataset.
  return p.host.start_method == "fork" ? kForkedWorkerStartBytes : p.main.uss_bytes;
}

struct Settings {
  int64_t workers = 0;
  int64_t prefetch = kDefaultPrefetch;
  bool pin = true;
  bool persistent = true;
};

// What the loader costs the host with `s`.
LoaderMemory memory_of(const LoaderProfile& p, const LoaderRequest& r, const Settings& s,
                       const CopyModel& copy, int64_t own_bytes) {
  LoaderMemory m;
  const double per_probe_batch = static_cast<double>(r.batch) / static_cast<double>(p.batch_size);
  m.main_bytes = p.main.pss_bytes;
  m.copyable_bytes = copy.heap;
  m.batch_bytes = scale(p.batch.storage_bytes, per_probe_batch);
  int64_t pinned_batch = 0;
  for (int64_t t : p.batch.tensor_bytes) pinned_batch += pow2_ceil(scale(t, per_probe_batch));
  const int64_t n = s.workers;
  const int64_t base_fds = p.main.open_fds.value_or(0);
  const int64_t base_maps = p.main.maps.value_or(0);
  if (n == 0) {
    m.batches_in_flight = 1;
    m.pinned_bytes = s.pin ? 2 * pinned_batch : 0;
    m.host_ram_bytes = m.main_bytes + m.batch_bytes + m.pinned_bytes;
    m.host_ram_first_epoch_bytes = m.host_ram_bytes;
    m.open_fds = base_fds;
    m.maps = base_maps;
    m.fork_commit_bytes = p.host.committed_as_bytes.value_or(0);
    return m;
  }
  m.worker_own_bytes = own_bytes;
  m.batches_in_flight = s.prefetch * n + 1;
  m.worker_copy_first_epoch_bytes = copy.after(1.0 / static_cast<double>(n));
  m.worker_copy_bytes = s.persistent ? copy.after(1.0) : m.worker_copy_first_epoch_bytes;
  // A batch is in /dev/shm from collate until it is pinned (or, unpinned, until it is freed).
  m.shm_bytes = (s.prefetch * n + (s.pin ? 0 : 1)) * m.batch_bytes;
  m.pinned_bytes = s.pin ? m.batches_in_flight * pinned_batch : 0;
  const int64_t in_flight = m.shm_bytes + m.pinned_bytes;
  m.host_ram_first_epoch_bytes =
      m.main_bytes + n * (own_bytes + m.worker_copy_first_epoch_bytes) + in_flight;
  m.host_ram_bytes = m.main_bytes + n * (own_bytes + m.worker_copy_bytes) + in_flight;
  const int64_t shared = p.host.sharing_strategy == "file_system" ? 0 : 1;
  m.open_fds = base_fds + n * kFdsPerWorker + shared * p.batch.tensors * m.batches_in_flight;
  m.maps = base_maps + p.batch.tensors * m.batches_in_flight;
  m.fork_commit_bytes =
      p.host.committed_as_bytes.value_or(0) + n * p.main.vm_data_bytes + m.shm_bytes;
  return m;
}

// The memory the run may use before something ends it, and what ends it.
struct RamLimit {
  int64_t bytes = INT64_MAX;
  std::string code;
};

RamLimit ram_limit(const LoaderProfile& p, const HostOverrides& host) {
  RamLimit limit;
  if (p.host.mem_available_bytes) {
    // The probe's own process is gone when training starts.
    limit = {*p.host.mem_available_bytes + p.main.pss_bytes, "host_ram"};
  }
  const std::optional<int64_t> cgroup =
      host.memory_limit_bytes ? host.memory_limit_bytes : p.host.cgroup_memory_max_bytes;
  if (cgroup && *cgroup < limit.bytes) limit = {*cgroup, "cgroup_memory"};
  return limit;
}

std::optional<int64_t> commit_limit(const LoaderProfile& p, const HostOverrides& host) {
  if (host.commit_limit_bytes) return host.commit_limit_bytes;
  if (p.host.overcommit_memory == 2) return p.host.commit_limit_bytes;
  return std::nullopt;
}

bool fits_memory(const LoaderProfile& p, const LoaderRequest& r, const LoaderMemory& m) {
  if (m.host_ram_bytes > ram_limit(p, r.host).bytes) return false;
  const std::optional<int64_t> commit = commit_limit(p, r.host);
  return !commit || m.fork_commit_bytes <= *commit;
}

std::optional<int64_t> shm_size(const LoaderProfile& p, const HostOverrides& host) {
  if (host.shm_bytes) return host.shm_bytes;
  return p.host.shm_free_bytes ? p.host.shm_free_bytes : p.host.shm_total_bytes;
}

// The prefetch that hides a slow sample: the batches queued must cover one worker's batch and
// the slowest sample's extra time, at the rate the loop takes them.
int64_t prefetch_for(const LoaderProfile& p, int64_t n, int64_t batch, double rate,
                     double consumed) {
  const double worker_batch_s = static_cast<double>(n * batch) / rate;
  const double slow_sample_s = std::max(0.0, p.fetch.p99_s - p.fetch.mean_s);
  const double period_s = static_cast<double>(batch) / consumed;
  const double need = (worker_batch_s + slow_sample_s) / (static_cast<double>(n) * period_s);
  if (!std::isfinite(need)) return kDefaultPrefetch;
  return std::clamp(static_cast<int64_t>(std::ceil(need)), kDefaultPrefetch, kMaxPrefetch);
}

// The main process's own time per batch from workers (taking it off the queue, mapping its
// shared memory), which adds to every step: the median the probe measured, else nothing.
double receive_s(const LoaderProfile& p) {
  std::vector<double> measured;
  for (const WorkerRun& r : p.runs) {
    if (r.receive_s) measured.push_back(*r.receive_s);
  }
  return median(measured);
}

// Samples per second training gets: loading in the training process adds to every step, and
// with workers so does taking each batch from them.
double delivered(double loader, int64_t n, int64_t batch, double step_s, double receive) {
  const auto b = static_cast<double>(batch);
  if (n == 0) return b / (step_s + b / loader);
  return std::min(loader, b / (step_s + receive));
}

std::string pct(double fraction) {
  return fmt::format("{:.0f}%", fraction * 100);
}

void warn(LoaderPlan& plan, std::string code, std::string message, std::string fix) {
  plan.warnings.push_back({std::move(code), std::move(message), std::move(fix)});
}

// The most workers whose memory stays within the limits.
int64_t most_workers_that_fit(const LoaderProfile& p, const LoaderRequest& r, Settings s,
                              const CopyModel& copy, int64_t start, int64_t cores) {
  int64_t most = 0;
  for (int64_t n = 1; n <= cores; ++n) {
    s.workers = n;
    if (fits_memory(p, r, memory_of(p, r, s, copy, start))) most = n;
  }
  return most;
}

void memory_warnings(const LoaderProfile& p, const LoaderRequest& r, const Settings& s,
                     const CopyModel& copy, int64_t start, LoaderPlan& plan) {
  const LoaderMemory& m = plan.memory;
  const int64_t n = s.workers;
  const bool objects = copy.heap > m.batch_bytes && copy.heap > (int64_t{64} << 20);
  const std::string why =
      objects ? fmt::format(
                    ": each forked worker copies the pages of the Dataset's {} Python objects "
                    "({}) as it reads them, because reading an object writes its reference count",
                    format_count(p.inventory.python_objects), format_bytes(copy.heap))
              : "";
  const int64_t most = most_workers_that_fit(p, r, s, copy, start, plan.usable_cores);
  const std::string fewer = most > 0 && most < n ? fmt::format("; or num_workers={}", most) : "";
  const std::string fix_objects =
      objects ? "keep the per-sample data in one NumPy array (or a file opened with "
                "np.load(path, mmap_mode='r')) and index it in __getitem__, not in Python lists "
                "and dicts"
              : "use fewer workers or a smaller prefetch_factor";
  const RamLimit limit = ram_limit(p, r.host);
  if (m.host_ram_bytes > limit.bytes) {
    if (limit.code == "cgroup_memory") {
      warn(plan, "cgroup_memory",
           fmt::format("{} workers take {} of host RAM over the run, more than the memory limit "
                       "of {}{}; the OOM killer ends a worker (\"DataLoader worker (pid N) is "
                       "killed by signal: Killed\")",
                       n, format_bytes(m.host_ram_bytes), format_bytes(limit.bytes), why),
           fix_objects + fewer);
    } else {
      warn(plan, "host_ram",
           fmt::format("{} workers take {} of host RAM over the run, more than the {} available{}; "
                       "the kernel's OOM killer ends the run",
                       n, format_bytes(m.host_ram_bytes), format_bytes(limit.bytes), why),
           fix_objects + fewer);
    }
  }
  if (const std::optional<int64_t> commit = commit_limit(p, r.host);
      commit && n > 0 && m.fork_commit_bytes > *commit) {
    warn(plan, "commit_limit",
         fmt::format("with vm.overcommit_memory=2 every fork charges the main process's {} of "
                     "private memory to the commit limit: {} workers bring it to {} of {}, and "
                     "the fork or a shared-memory mmap fails with \"Cannot allocate memory\" "
                     "although free RAM looks ample",
                     format_bytes(p.main.vm_data_bytes), n, format_bytes(m.fork_commit_bytes),
                     format_bytes(*commit)),
         fix_objects + " (a smaller main process charges less per fork)" + fewer);
  }
  if (const std::optional<int64_t> shm = shm_size(p, r.host); shm && m.shm_bytes > *shm) {
    warn(plan, "shm_small",
         fmt::format("{} workers x prefetch {} keep up to {} of batches in /dev/shm, more than "
                     "its {}: a worker dies with \"Bus error\" (\"insufficient shared memory\")",
                     n, s.prefetch, format_bytes(m.shm_bytes), format_bytes(*shm)),
         fmt::format("give the container more: docker run --shm-size={} (or --ipc=host); or "
                     "fewer workers or a smaller prefetch_factor; or send uint8 and convert on "
                     "the GPU",
                     size_arg(pow2_ceil(2 * m.shm_bytes))));
  }
  if (p.host.nofile_soft && n > 0 && p.host.sharing_strategy != "file_system" &&
      static_cast<double>(m.open_fds) > kNearLimit * static_cast<double>(*p.host.nofile_soft)) {
    warn(plan, "fd_limit",
         fmt::format("up to {} open descriptors ({} tensors a batch x {} batches in flight) "
                     "against a limit of {}: \"received 0 items of ancdata\" or \"Too many open "
                     "files\"",
                     m.open_fds, p.batch.tensors, m.batches_in_flight, *p.host.nofile_soft),
         fmt::format("ulimit -n {} before the run, or "
                     "torch.multiprocessing.set_sharing_strategy('file_system')",
                     std::max<int64_t>(p.host.nofile_hard.value_or(65536), 65536)));
  }
  if (p.host.max_map_count && n > 0 &&
      static_cast<double>(m.maps) > kNearLimit * static_cast<double>(*p.host.max_map_count)) {
    warn(plan, "max_map_count",
         fmt::format("the main process maps up to {} regions against vm.max_map_count {}: "
                     "\"unable to mmap ... Cannot allocate memory (12)\"",
                     m.maps, *p.host.max_map_count),
         "sysctl -w vm.max_map_count=262144; or fewer tensors a batch");
  }
  if (p.host.address_space_limit_bytes &&
      p.main.vm_size_bytes + m.shm_bytes + m.pinned_bytes > *p.host.address_space_limit_bytes) {
    warn(plan, "address_space_limit",
         fmt::format("the main process's address space ({} with the batches in flight) is over "
                     "its limit (ulimit -v) of {}: \"Cannot allocate memory\"",
                     format_bytes(p.main.vm_size_bytes + m.shm_bytes + m.pinned_bytes),
                     format_bytes(*p.host.address_space_limit_bytes)),
         "ulimit -v unlimited before the run");
  }
}

void throughput_warnings(const LoaderProfile& p, const LoaderRequest& r, const Settings& s,
                         const RateModel& rates, LoaderPlan& plan) {
  const int64_t n = s.workers;
  const int64_t cores = plan.usable_cores;
  if (plan.bottleneck == "loader") {
    int64_t best = 0;
    for (int64_t k = 1; k <= cores; ++k) {
      if (rates.at(k) > rates.at(best)) best = k;
    }
    const double cpu_per_sample = 1 / rates.at(1);
    std::string fix =
        best > n ? fmt::format("num_workers={} ({:.0f} samples/s)", best, rates.at(best))
                 : fmt::format(
                       "the {} cores are the limit at {:.1f} ms of CPU a sample: preprocess once "
                       "and cache what __getitem__ computes (decoded, resized, normalised), or "
                       "decode less (smaller images, fewer frames, keyframe-dense video)",
                       cores, cpu_per_sample * 1e3);
    warn(plan, "loader_bottleneck",
         fmt::format("the loader delivers {:.0f} samples/s with {} workers and the GPU takes "
                     "{:.0f}: the GPU waits {} of the time",
                     plan.loader_samples_per_s, n, plan.gpu_samples_per_s,
                     pct(1 - plan.samples_per_s / plan.gpu_samples_per_s)),
         fix);
  }
  if (!plan.chosen && n > cores) {
    warn(plan, "too_many_workers",
         fmt::format("{} workers for {} usable cores: they take turns on the cores, and PyTorch "
                     "warns that the DataLoader may run slow or freeze",
                     n, cores),
         fmt::format("num_workers={} or fewer", cores));
  }
  if (n > 0 && p.worker_os_threads) {
    // A worker runs its main thread and the queue's feeder thread; more are compute pools.
    const int64_t pools = std::max<int64_t>(*p.worker_os_threads - 3, 0);
    if (pools > 0 && n * (1 + pools) > cores) {
      warn(plan, "thread_oversubscription",
           fmt::format("each worker ran {} threads ({} beyond PyTorch's own): {} workers run {} "
                       "threads on {} cores",
                       *p.worker_os_threads, pools, n, n * *p.worker_os_threads, cores),
           "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 in the environment; in worker_init_fn "
           "cv2.setNumThreads(0); for PyAV, stream.thread_count = 1");
    }
  }
  if (n > 0 && !s.persistent) {
    double start_s = 0;
    for (const WorkerRun& run : p.runs) {
      if (run.num_workers > 0 && run.first_batch_s) start_s = std::max(start_s, *run.first_batch_s);
    }
    if (start_s > 0) {
      warn(plan, "workers_restart",
           fmt::format("without persistent workers every epoch starts {} workers again (the probe "
                       "waited {} for the first batch)",
                       n, format_duration(start_s)),
           "persistent_workers=True (workers then keep their memory between epochs)");
    }
  }
  if (n > 0 && plan.receive_s > 0.05 * r.step_time_s) {
    warn(plan, "receive_cost",
         fmt::format("taking each batch from a worker costs the training loop {} ({} of the "
                     "{} step): the probe measured it in the main process",
                     format_duration(plan.receive_s), pct(plan.receive_s / r.step_time_s),
                     format_duration(r.step_time_s)),
         "send fewer, larger tensors (stack per key in collate_fn) and uint8 rather than "
         "float32 where the data allows");
  }
  if (p.batch.tensors > 32 && n > 0) {
    warn(plan, "many_tensors",
         fmt::format("each batch carries {} tensors; the main process spends about 0.25 ms on "
                     "each one a worker sends ({} a batch)",
                     p.batch.tensors,
                     format_duration(static_cast<double>(p.batch.tensors) * kTensorCrossingS)),
         "stack them into fewer tensors in collate_fn (one per key)");
  }
  if (n == 0 && !plan.chosen) {
    const double load_s = static_cast<double>(r.batch) / plan.loader_samples_per_s;
    if (load_s > 0.05 * r.step_time_s) {
      warn(plan, "no_workers",
           fmt::format("loading in the training process adds {} to every step of {}",
                       format_duration(load_s), format_duration(r.step_time_s)),
           "num_workers=1 or more, so that loading overlaps the GPU's work");
    }
  }
  std::vector<int> e_used;
  for (int cpu : p.host.affinity) {
    if (std::find(p.host.e_cores.begin(), p.host.e_cores.end(), cpu) != p.host.e_cores.end()) {
      e_used.push_back(cpu);
    }
  }
  if (!e_used.empty() && n > 0) {
    warn(plan, "e_cores",
         fmt::format("{} of the CPUs the run may use are E-cores, where a worker runs slower",
                     e_used.size()),
         "pin the run to the P-cores with taskset -c (see trainfit doctor)");
  }
}

Status check(const LoaderRequest& r) {
  if (r.batch < 1 || r.batch > (int64_t{1} << 30)) {
    return invalid_argument(fmt::format("--batch {}: must be between 1 and 2^30", r.batch),
                            "the batch size training uses, e.g. --batch 32");
  }
  if (!(r.step_time_s > 0) || !std::isfinite(r.step_time_s)) {
    return invalid_argument("the GPU's step time must be above zero",
                            "e.g. --step-time 80ms, or a model with --gpu");
  }
  const LoaderSettings& g = r.given;
  if (g.num_workers && (*g.num_workers < 0 || *g.num_workers > 4096)) {
    return invalid_argument(fmt::format("--num-workers {}: must be 0 to 4096", *g.num_workers),
                            "as DataLoader's num_workers");
  }
  if (g.prefetch_factor) {
    if (*g.prefetch_factor < 1 || *g.prefetch_factor > 1024) {
      return invalid_argument(
          fmt::format("--prefetch-factor {}: must be 1 to 1024", *g.prefetch_factor),
          "batches each worker loads ahead; PyTorch's default is 2");
    }
    if (g.num_workers == 0) {
      return invalid_argument("--prefetch-factor with --num-workers 0",
                              "PyTorch refuses a prefetch_factor without workers");
    }
  }
  if (g.persistent_workers.value_or(false) && g.num_workers == 0) {
    return invalid_argument("--persistent-workers with --num-workers 0",
                            "PyTorch needs workers to keep them");
  }
  if (r.host.cpus && (*r.host.cpus < 1 || *r.host.cpus > 65536)) {
    return invalid_argument(fmt::format("--cpus {}: must be 1 to 65536", *r.host.cpus),
                            "the cores the training process may use");
  }
  return {};
}

// Every byte count the plan adds up stays far inside 64 bits: the largest it could reach (the
// most workers, the deepest prefetch) is checked in floating point first.
Status check_sizes(const LoaderProfile& p, const LoaderRequest& r, int64_t cores) {
  const double workers = static_cast<double>(std::max(cores, r.given.num_workers.value_or(0)));
  const double prefetch =
      static_cast<double>(std::max(kMaxPrefetch, r.given.prefetch_factor.value_or(0)));
  const double per_probe_batch = static_cast<double>(r.batch) / static_cast<double>(p.batch_size);
  double batch = static_cast<double>(p.batch.storage_bytes);
  for (int64_t t : p.batch.tensor_bytes) batch += 2 * static_cast<double>(t);
  batch = batch * per_probe_batch + static_cast<double>(p.batch.tensors);
  const double worker = static_cast<double>(p.main.uss_bytes) +
                        static_cast<double>(p.inventory.python_object_bytes) +
                        static_cast<double>(p.inventory.flat_buffer_bytes) +
                        static_cast<double>(p.main.vm_data_bytes);
  double runs = 0;
  for (const WorkerRun& run : p.runs) {
    for (const WorkerMemory& w : run.workers) {
      if (w.last) runs = std::max(runs, static_cast<double>(w.last->uss_bytes));
    }
  }
  const double most = static_cast<double>(p.main.pss_bytes) + workers * (worker + runs) +
                      (prefetch * workers + 2) * batch +
                      static_cast<double>(p.host.committed_as_bytes.value_or(0));
  if (most > 0x1p61) {
    return out_of_range(
        fmt::format("the loader's memory at batch {} overflows: batches of {} with up to {:.0f} "
                    "workers",
                    r.batch, format_bytes(static_cast<int64_t>(std::min(batch, 0x1p62))), workers),
        "check --batch and the profile's batch sizes");
  }
  return {};
}

}  // namespace

Result<LoaderPlan> plan_loader(const LoaderProfile& p, const LoaderRequest& r) {
  TF_RETURN_IF_ERROR(check(r));
  LoaderPlan plan;
  plan.batch = r.batch;
  plan.step_time_s = r.step_time_s;
  plan.step_time_from = r.step_time_from;
  plan.start_method = p.host.start_method;
  plan.usable_cores = usable_cores(p, r.host);
  TF_RETURN_IF_ERROR(check_sizes(p, r, plan.usable_cores));
  plan.gpu_samples_per_s = static_cast<double>(r.batch) / r.step_time_s;
  const RateModel rates(p, r.batch, plan.usable_cores);
  const CopyModel copy = copy_model(p);
  const int64_t start = worker_own_bytes(p, copy);
  const double receive = receive_s(p);

  Settings s;
  s.pin = r.given.pin_memory.value_or(true);
  plan.chosen = !r.given.num_workers;
  if (r.given.num_workers) {
    s.workers = *r.given.num_workers;
  } else {
    // The fewest workers that deliver the GPU's rate with headroom, within the memory limits;
    // else the fastest that fits; 0 (loading in the training process) only when it costs the
    // step less than 5%.
    const int64_t cores = plan.usable_cores;
    std::optional<int64_t> pick;
    int64_t fastest = -1;
    for (int64_t n = 0; n <= cores; ++n) {
      Settings trial = s;
      trial.workers = n;
      trial.persistent = n > 0;
      if (!fits_memory(p, r, memory_of(p, r, trial, copy, start)) && n > 0) continue;
      const double rate = rates.at(n);
      const bool enough = n == 0 ? static_cast<double>(r.batch) / rate < 0.05 * r.step_time_s
                                 : rate >= kHeadroom * plan.gpu_samples_per_s;
      if (enough) {
        pick = n;
        break;
      }
      const auto got = [&](int64_t k) {
        return delivered(rates.at(k), k, r.batch, r.step_time_s, receive);
      };
      if (fastest < 0 || got(n) > 1.02 * got(fastest)) fastest = n;
    }
    s.workers = pick.value_or(std::max<int64_t>(fastest, 0));
  }
  s.persistent = r.given.persistent_workers.value_or(s.workers > 0);
  plan.num_workers = s.workers;
  plan.pin_memory = s.pin;
  plan.persistent_workers = s.persistent;
  plan.loader_samples_per_s = rates.at(s.workers);
  plan.receive_s = s.workers > 0 ? receive : 0;
  plan.samples_per_s =
      delivered(plan.loader_samples_per_s, s.workers, r.batch, r.step_time_s, receive);
  const double fed = s.workers == 0 ? plan.samples_per_s : plan.loader_samples_per_s;
  plan.bottleneck = fed < 0.98 * plan.gpu_samples_per_s ? "loader" : "gpu";
  if (s.workers > 0) {
    s.prefetch = r.given.prefetch_factor.value_or(
        prefetch_for(p, s.workers, r.batch, plan.loader_samples_per_s, plan.samples_per_s));
    // A larger prefetch than 2 only where the memory allows it.
    while (!r.given.prefetch_factor && s.prefetch > kDefaultPrefetch) {
      const LoaderMemory m = memory_of(p, r, s, copy, start);
      const std::optional<int64_t> shm = shm_size(p, r.host);
      if (fits_memory(p, r, m) && (!shm || m.shm_bytes <= *shm)) break;
      --s.prefetch;
    }
    plan.prefetch_factor = s.prefetch;
  }
  plan.memory = memory_of(p, r, s, copy, start);
  plan.epoch_s = static_cast<double>(p.length) / plan.samples_per_s;
  for (int64_t n = 0; n <= std::max(plan.usable_cores, s.workers); ++n) {
    plan.curve.push_back({n, rates.at(n), rates.measured(n)});
  }
  if (s.workers > 0 && !p.host.thread_env.contains("OMP_NUM_THREADS")) {
    // PyTorch sets one thread in each worker for its own ops only; NumPy, OpenCV and decoders
    // size their pools to the host (torchrun sets this too when it starts several processes).
    plan.env.emplace_back("OMP_NUM_THREADS", "1");
  }
  memory_warnings(p, r, s, copy, start, plan);
  throughput_warnings(p, r, s, rates, plan);
  return plan;
}

}  // namespace trainfit
