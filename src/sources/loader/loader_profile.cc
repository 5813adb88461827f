#include "sources/loader/loader_profile.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "sources/json_fields.h"

namespace trainfit {
namespace {

using nlohmann::json;

constexpr std::string_view kHint =
    "write it with `python3 -m trainfit.loader --dataset MODULE:FACTORY --out FILE` on the "
    "host that trains";
// Bounds that keep sums and products of the profile's sizes inside 64 bits.
constexpr int64_t kMaxBytes = int64_t{1} << 50;
constexpr int64_t kMaxCount = int64_t{1} << 40;
constexpr int64_t kMaxCpus = 1 << 16;
constexpr int64_t kMaxWorkers = 4096;
constexpr double kMaxSeconds = 1e6;

Result<std::vector<int>> cpu_list(const JsonFields& f, const char* key) {
  std::vector<int> cpus;
  if (!f.has(key)) return cpus;
  TF_ASSIGN_OR_RETURN(const json* list, f.array(key));
  if (list->size() > static_cast<size_t>(kMaxCpus))
    return f.error(fmt::format("'{}' is too long", key));
  for (const json& c : *list) {
    if (!c.is_number_integer() || c.get<int64_t>() < 0 || c.get<int64_t>() >= kMaxCpus) {
      return f.error(fmt::format("'{}' must list CPU numbers", key));
    }
    cpus.push_back(static_cast<int>(c.get<int64_t>()));
  }
  return cpus;
}

Result<ProcessMemory> parse_memory(const JsonFields& f) {
  static constexpr std::array<IntegerField<ProcessMemory>, 6> kFields = {{
      {"rss_bytes", &ProcessMemory::rss_bytes, 0, kMaxBytes},
      {"pss_bytes", &ProcessMemory::pss_bytes, 0, kMaxBytes},
      {"uss_bytes", &ProcessMemory::uss_bytes, 0, kMaxBytes},
      {"anon_bytes", &ProcessMemory::anon_bytes, 0, kMaxBytes},
      {"vm_size_bytes", &ProcessMemory::vm_size_bytes, 0, kMaxBytes},
      {"vm_data_bytes", &ProcessMemory::vm_data_bytes, 0, kMaxBytes},
  }};
  ProcessMemory m;
  TF_RETURN_IF_ERROR(read_integers(f, kFields, m));
  TF_ASSIGN_OR_RETURN(m.open_fds, f.integer_in_or_null("open_fds", 0, kMaxCount));
  TF_ASSIGN_OR_RETURN(m.maps, f.integer_in_or_null("maps", 0, kMaxCount));
  return m;
}

Result<std::optional<ProcessMemory>> memory_or_null(const JsonFields& f, const char* key) {
  TF_ASSIGN_OR_RETURN(const std::optional<JsonFields> m, f.object_or_null(key));
  if (!m) return std::optional<ProcessMemory>();
  TF_ASSIGN_OR_RETURN(ProcessMemory parsed, parse_memory(*m));
  return std::optional<ProcessMemory>(parsed);
}

Result<TimeSummary> parse_times(const JsonFields& f) {
  TimeSummary t;
  TF_ASSIGN_OR_RETURN(t.count, f.integer_in("count", 1, kMaxCount));
  TF_ASSIGN_OR_RETURN(t.mean_s, f.number("mean_s", 0, kMaxSeconds));
  TF_ASSIGN_OR_RETURN(t.median_s, f.number("median_s", 0, kMaxSeconds));
  TF_ASSIGN_OR_RETURN(t.p90_s, f.number("p90_s", 0, kMaxSeconds));
  TF_ASSIGN_OR_RETURN(t.p99_s, f.number("p99_s", 0, kMaxSeconds));
  TF_ASSIGN_OR_RETURN(t.max_s, f.number("max_s", 0, kMaxSeconds));
  return t;
}

Result<LoaderHost> parse_host(const JsonFields& f) {
  LoaderHost h;
  TF_ASSIGN_OR_RETURN(h.logical_cpus, f.integer_in("logical_cpus", 1, kMaxCpus));
  TF_ASSIGN_OR_RETURN(h.affinity, cpu_list(f, "affinity"));
  if (h.affinity.empty()) return f.error("'affinity' must list at least one CPU");
  TF_ASSIGN_OR_RETURN(h.physical_cores, f.integer_in("physical_cores", 1, kMaxCpus));
  TF_ASSIGN_OR_RETURN(h.p_cores, cpu_list(f, "p_cores"));
  TF_ASSIGN_OR_RETURN(h.e_cores, cpu_list(f, "e_cores"));
  struct OptionalBytes {
    const char* key;
    std::optional<int64_t> LoaderHost::*member;
    int64_t max;
  };
  const OptionalBytes fields[] = {
      {"mem_total_bytes", &LoaderHost::mem_total_bytes, kMaxBytes},
      {"mem_available_bytes", &LoaderHost::mem_available_bytes, kMaxBytes},
      {"swap_total_bytes", &LoaderHost::swap_total_bytes, kMaxBytes},
      {"commit_limit_bytes", &LoaderHost::commit_limit_bytes, kMaxBytes},
      {"committed_as_bytes", &LoaderHost::committed_as_bytes, kMaxBytes},
      {"overcommit_memory", &LoaderHost::overcommit_memory, 2},
      {"max_map_count", &LoaderHost::max_map_count, kMaxCount},
      {"cgroup_memory_max_bytes", &LoaderHost::cgroup_memory_max_bytes, kMaxBytes},
      {"cgroup_memory_current_bytes", &LoaderHost::cgroup_memory_current_bytes, kMaxBytes},
      {"shm_total_bytes", &LoaderHost::shm_total_bytes, kMaxBytes},
      {"shm_free_bytes", &LoaderHost::shm_free_bytes, kMaxBytes},
      {"nofile_soft", &LoaderHost::nofile_soft, kMaxCount},
      {"nofile_hard", &LoaderHost::nofile_hard, kMaxCount},
      {"address_space_limit_bytes", &LoaderHost::address_space_limit_bytes, kMaxBytes},
  };
  for (const OptionalBytes& o : fields) {
    TF_ASSIGN_OR_RETURN(h.*o.member, f.integer_in_or_null(o.key, 0, o.max));
  }
  TF_ASSIGN_OR_RETURN(h.cgroup_cpu_quota, f.number_or_null("cgroup_cpu_quota", 0, kMaxCpus));
  TF_ASSIGN_OR_RETURN(h.start_method, f.string("start_method"));
  if (h.start_method != "fork" && h.start_method != "spawn" && h.start_method != "forkserver") {
    return f.error(
        fmt::format("'start_method' is '{}': use fork, spawn or forkserver", h.start_method));
  }
  h.sharing_strategy = f.string_or("sharing_strategy", "file_descriptor");
  if (f.has("thread_env")) {
    TF_ASSIGN_OR_RETURN(const JsonFields env, f.object("thread_env"));
    for (const auto& [name, value] : env.json().items()) {
      if (!value.is_string()) return env.error(fmt::format("'{}' must be a string", name));
      h.thread_env[name] = value.get<std::string>();
    }
  }
  TF_ASSIGN_OR_RETURN(h.cuda, f.boolean_or("cuda", false));
  return h;
}

Result<DatasetInventory> parse_inventory(const JsonFields& f) {
  static constexpr std::array<IntegerField<DatasetInventory>, 6> kFields = {{
      {"python_objects", &DatasetInventory::python_objects, 0, kMaxCount},
      {"python_object_bytes", &DatasetInventory::python_object_bytes, 0, kMaxBytes},
      {"flat_buffers", &DatasetInventory::flat_buffers, 0, kMaxCount},
      {"flat_buffer_bytes", &DatasetInventory::flat_buffer_bytes, 0, kMaxBytes},
      {"tensor_bytes", &DatasetInventory::tensor_bytes, 0, kMaxBytes},
      {"mapped_bytes", &DatasetInventory::mapped_bytes, 0, kMaxBytes},
  }};
  DatasetInventory d;
  TF_RETURN_IF_ERROR(read_integers(f, kFields, d));
  if (d.tensor_bytes > d.flat_buffer_bytes) {
    return f.error("'tensor_bytes' is more than 'flat_buffer_bytes'");
  }
  return d;
}

Result<BatchProfile> parse_batch(const JsonFields& f) {
  BatchProfile b;
  TF_ASSIGN_OR_RETURN(b.size, f.integer_in("size", 1, kMaxCount));
  TF_ASSIGN_OR_RETURN(const JsonFields collate, f.object("collate"));
  TF_ASSIGN_OR_RETURN(b.collate, parse_times(collate));
  TF_ASSIGN_OR_RETURN(const std::optional<JsonFields> pin, f.object_or_null("pin"));
  if (pin) {
    TF_ASSIGN_OR_RETURN(b.pin, parse_times(*pin));
  }
  TF_ASSIGN_OR_RETURN(b.tensors, f.integer_in("tensors", 0, kMaxCount));
  TF_ASSIGN_OR_RETURN(b.bytes, f.integer_in("bytes", 0, kMaxBytes));
  TF_ASSIGN_OR_RETURN(b.storage_bytes, f.integer_in("storage_bytes", 0, kMaxBytes));
  TF_ASSIGN_OR_RETURN(const json* sizes, f.array("tensor_bytes"));
  if (sizes->size() != static_cast<size_t>(b.tensors)) {
    return f.error("'tensor_bytes' must hold one size per tensor");
  }
  for (const json& s : *sizes) {
    if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > kMaxBytes) {
      return f.error("'tensor_bytes' must list byte counts");
    }
    b.tensor_bytes.push_back(s.get<int64_t>());
  }
  return b;
}

Result<WorkerRun> parse_run(const JsonFields& f) {
  WorkerRun r;
  TF_ASSIGN_OR_RETURN(r.num_workers, f.integer_in("num_workers", 0, kMaxWorkers));
  TF_ASSIGN_OR_RETURN(r.batches, f.integer_in("batches", 0, kMaxCount));
  TF_ASSIGN_OR_RETURN(r.seconds, f.number("seconds", 0, kMaxSeconds));
  TF_ASSIGN_OR_RETURN(r.samples_per_s, f.number_or_null("samples_per_s", 0, 1e12));
  TF_ASSIGN_OR_RETURN(r.first_batch_s, f.number_or_null("first_batch_s", 0, kMaxSeconds));
  TF_ASSIGN_OR_RETURN(r.receive_s, f.number_or_null("receive_s", 0, kMaxSeconds));
  TF_ASSIGN_OR_RETURN(r.main_memory, memory_or_null(f, "main_memory"));
  if (f.has("worker_memory")) {
    TF_ASSIGN_OR_RETURN(const json* workers, f.array("worker_memory"));
    if (workers->size() > static_cast<size_t>(r.num_workers)) {
      return f.error("'worker_memory' lists more workers than 'num_workers'");
    }
    for (size_t i = 0; i < workers->size(); ++i) {
      TF_ASSIGN_OR_RETURN(const JsonFields w, object_at(*workers, i, "worker_memory", kHint));
      WorkerMemory m;
      TF_ASSIGN_OR_RETURN(m.first, memory_or_null(w, "first"));
      TF_ASSIGN_OR_RETURN(m.last, memory_or_null(w, "last"));
      r.workers.push_back(m);
    }
  }
  return r;
}

Result<LoaderProfile> parse_document(const json& doc) {
  if (!doc.is_object()) return parse_error("profile: must be a JSON object", std::string(kHint));
  const JsonFields f(doc, "profile", kHint);
  TF_ASSIGN_OR_RETURN(const std::string format, f.string("format"));
  if (format != kLoaderProfileFormat) {
    return f.error(fmt::format("'format' is '{}': not a trainfit loader profile", format));
  }
  TF_ASSIGN_OR_RETURN(const int64_t version, f.integer("version", 1));
  if (version != kLoaderProfileVersion) {
    return f.error(
        fmt::format("version {}; this trainfit reads version {}", version, kLoaderProfileVersion));
  }
  TF_ASSIGN_OR_RETURN(const bool complete, f.boolean_or("complete", false));
  if (!complete) {
    return f.error(fmt::format("the probe stopped early ({}); fix that and probe again",
                               f.string_or("stopped", "no reason recorded")));
  }
  LoaderProfile p;
  TF_ASSIGN_OR_RETURN(const JsonFields settings, f.object("settings"));
  TF_ASSIGN_OR_RETURN(p.batch_size, settings.integer_in("batch_size", 1, kMaxCount));
  TF_ASSIGN_OR_RETURN(const JsonFields host, f.object("host"));
  TF_ASSIGN_OR_RETURN(p.host, parse_host(host));
  TF_ASSIGN_OR_RETURN(const JsonFields dataset, f.object("dataset"));
  TF_ASSIGN_OR_RETURN(p.length, dataset.integer_in("length", 1, kMaxCount));
  p.dataset = dataset.string_or("spec", dataset.string_or("type", "dataset"));
  TF_ASSIGN_OR_RETURN(const JsonFields memory, f.object("memory"));
  TF_ASSIGN_OR_RETURN(const JsonFields main, memory.object("main"));
  TF_ASSIGN_OR_RETURN(p.main, parse_memory(main));
  TF_ASSIGN_OR_RETURN(const std::optional<JsonFields> construction,
                      memory.object_or_null("construction"));
  if (construction) {
    TF_ASSIGN_OR_RETURN(p.before_dataset, memory_or_null(*construction, "before"));
    TF_ASSIGN_OR_RETURN(p.after_dataset, memory_or_null(*construction, "after"));
  }
  TF_ASSIGN_OR_RETURN(const JsonFields inventory, memory.object("inventory"));
  TF_ASSIGN_OR_RETURN(p.inventory, parse_inventory(inventory));
  TF_ASSIGN_OR_RETURN(const JsonFields fetch, f.object("fetch"));
  TF_ASSIGN_OR_RETURN(const JsonFields first_touch, fetch.object("first_touch"));
  TF_ASSIGN_OR_RETURN(p.fetch, parse_times(first_touch));
  TF_ASSIGN_OR_RETURN(const std::optional<JsonFields> warm, fetch.object_or_null("warm"));
  if (warm) {
    TF_ASSIGN_OR_RETURN(p.warm, parse_times(*warm));
  }
  TF_ASSIGN_OR_RETURN(p.sample_bytes, fetch.integer_in("sample_bytes", 0, kMaxBytes));
  TF_ASSIGN_OR_RETURN(const JsonFields batch, f.object("batch"));
  TF_ASSIGN_OR_RETURN(p.batch, parse_batch(batch));
  TF_ASSIGN_OR_RETURN(const json* runs, f.array("workers"));
  for (size_t i = 0; i < runs->size(); ++i) {
    TF_ASSIGN_OR_RETURN(const JsonFields run, object_at(*runs, i, "workers", kHint));
    TF_ASSIGN_OR_RETURN(WorkerRun parsed, parse_run(run));
    p.runs.push_back(std::move(parsed));
  }
  TF_ASSIGN_OR_RETURN(const std::optional<JsonFields> threads, f.object_or_null("worker_threads"));
  if (threads) {
    TF_ASSIGN_OR_RETURN(p.worker_torch_threads,
                        threads->integer_in_or_null("torch_threads", 0, 4096));
    TF_ASSIGN_OR_RETURN(p.worker_os_threads, threads->integer_in_or_null("os_threads", 0, 1 << 20));
  }
  p.workers_skipped = f.string_or("workers_skipped", "");
  return p;
}

}  // namespace

Result<LoaderProfile> parse_loader_profile(std::string_view text, std::string_view source) {
  TF_ASSIGN_OR_RETURN(const json doc, parse_json_file(text, source, kHint));
  Result<LoaderProfile> p = parse_document(doc);
  if (!p.ok()) return p.status().with_context(std::string(source));
  p->source = std::string(source);
  return p;
}

}  // namespace trainfit
