#include "host/host_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <sstream>

namespace trainfit {
namespace {

constexpr const char* kCpuDir = "/sys/devices/system/cpu";
constexpr int64_t kBytesPerKiB = 1024;

// Numeric suffix of "policy12" / "state3" / "cpu7"; -1 when there is none.
int suffix_number(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  int n = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || n > 1'000'000) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

// Entries of `dir` named prefix<N>, in numeric order.
std::vector<std::string> numbered(const HostFs& fs, const std::string& dir,
                                  const std::string& prefix) {
  std::vector<std::pair<int, std::string>> found;
  for (const std::string& name : fs.list(dir)) {
    const int n = suffix_number(name, prefix);
    if (n >= 0) found.emplace_back(n, name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  names.reserve(found.size());
  for (auto& [n, name] : found) names.push_back(std::move(name));
  return names;
}

std::vector<int> read_cpus(const HostFs& fs, const std::string& path) {
  std::optional<std::string> line = fs.read_line(path);
  if (!line) return {};
  return parse_cpu_list(*line).value_or(std::vector<int>{});
}

// "key<tab>: value" lines of /proc/cpuinfo or /proc/self/status.
std::string field_value(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return {};
  std::string_view v = line.substr(colon + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.remove_suffix(1);
  return std::string(v);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

CpuPolicy read_policy(const HostFs& fs, const std::string& name) {
  const std::string dir = fmt::format("{}/cpufreq/{}/", kCpuDir, name);
  CpuPolicy p;
  p.name = name;
  p.cpus = read_cpus(fs, dir + "affected_cpus");
  p.driver = fs.read_line(dir + "scaling_driver").value_or("");
  p.governor = fs.read_line(dir + "scaling_governor").value_or("");
  p.epp = fs.read_line(dir + "energy_performance_preference").value_or("");
  p.min_khz = fs.read_int(dir + "scaling_min_freq");
  p.max_khz = fs.read_int(dir + "scaling_max_freq");
  p.cur_khz = fs.read_int(dir + "scaling_cur_freq");
  p.hw_max_khz = fs.read_int(dir + "cpuinfo_max_freq");
  p.base_khz = fs.read_int(dir + "base_frequency");
  return p;
}

void read_idle(const HostFs& fs, CpuInfo& cpu) {
  cpu.idle_driver = fs.read_line(fmt::format("{}/cpuidle/current_driver", kCpuDir)).value_or("");
  cpu.idle_governor =
      fs.read_line(fmt::format("{}/cpuidle/current_governor_ro", kCpuDir))
          .value_or(fs.read_line(fmt::format("{}/cpuidle/current_governor", kCpuDir)).value_or(""));
  const int first = cpu.online.empty() ? 0 : cpu.online.front();
  const std::string dir = fmt::format("{}/cpu{}/cpuidle", kCpuDir, first);
  for (const std::string& state : numbered(fs, dir, "state")) {
    const std::string s = fmt::format("{}/{}/", dir, state);
    IdleState st;
    st.name = fs.read_line(s + "name").value_or(state);
    st.latency_us = fs.read_int(s + "latency").value_or(0);
    st.residency_us = fs.read_int(s + "residency").value_or(0);
    st.disabled = fs.read_int(s + "disable").value_or(0) != 0;
    cpu.idle_states.push_back(std::move(st));
  }
  // The aggregate PM QoS request: a binary s32 in microseconds (root only on most systems).
  std::optional<std::string> qos = fs.read("/dev/cpu_dma_latency");
  if (qos && qos->size() == sizeof(int32_t)) {
    int32_t us = 0;
    std::memcpy(&us, qos->data(), sizeof us);
    cpu.dma_latency_us = us;
  }
}

std::string proc_path(const std::string& pid, const char* file) {
  return fmt::format("/proc/{}/{}", pid, file);
}

CpuInfo read_cpu(const HostFs& fs, const std::string& pid) {
  CpuInfo cpu;
  if (std::optional<std::string> info = fs.read("/proc/cpuinfo")) {
    std::istringstream lines(*info);
    for (std::string line; std::getline(lines, line);) {
      if (starts_with(line, "model name")) {
        cpu.model = field_value(line);
        break;
      }
    }
  }
  cpu.online = read_online_cpus(fs);
  if (std::optional<std::string> status = fs.read(proc_path(pid, "status"))) {
    std::istringstream lines(*status);
    for (std::string line; std::getline(lines, line);) {
      if (starts_with(line, "Cpus_allowed_list")) {
        cpu.affinity = parse_cpu_list(field_value(line)).value_or(std::vector<int>{});
      }
    }
  }
  for (const std::string& name : numbered(fs, fmt::format("{}/cpufreq", kCpuDir), "policy")) {
    cpu.policies.push_back(read_policy(fs, name));
  }
  cpu.intel_pstate_status =
      fs.read_line(fmt::format("{}/intel_pstate/status", kCpuDir)).value_or("");
  // The kernel names the directory amd_pstate; its documentation once said amd-pstate.
  cpu.amd_pstate_status =
      fs.read_line(fmt::format("{}/amd_pstate/status", kCpuDir))
          .value_or(fs.read_line(fmt::format("{}/amd-pstate/status", kCpuDir)).value_or(""));
  if (auto v = fs.read_int(fmt::format("{}/intel_pstate/no_turbo", kCpuDir))) {
    cpu.no_turbo = *v != 0;
  }
  if (auto v = fs.read_int(fmt::format("{}/cpufreq/boost", kCpuDir))) cpu.boost = *v != 0;
  cpu.p_cores = read_cpus(fs, "/sys/devices/cpu_core/cpus");
  cpu.e_cores = read_cpus(fs, "/sys/devices/cpu_atom/cpus");
  cpu.lp_cores = read_cpus(fs, "/sys/devices/cpu_lowpower/cpus");
  read_idle(fs, cpu);
  cpu.tuned_profile = fs.read_line("/etc/tuned/active_profile").value_or("");
  cpu.cur_mhz = read_cpu_mhz(fs, cpu.online);
  return cpu;
}

ProcessInfo read_process(const HostFs& fs, const std::string& pid) {
  ProcessInfo p;
  p.pid = pid;
  if (std::optional<std::string> status = fs.read(proc_path(pid, "status"))) {
    std::istringstream lines(*status);
    for (std::string line; std::getline(lines, line);) {
      if (starts_with(line, "Name:")) p.name = field_value(line);
      if (starts_with(line, "Threads:")) p.threads = parse_int(field_value(line));
    }
  }
  if (pid != "self") {
    // A live process has at least one descriptor open; none listed means fd/ was not readable.
    const size_t fds = fs.list(proc_path(pid, "fd")).size();
    if (fds > 0) p.open_fds = static_cast<int64_t>(fds);
  }
  if (std::optional<std::string> env = fs.read(proc_path(pid, "environ"))) {
    p.env_readable = true;
    std::string_view rest = *env;
    while (!rest.empty()) {
      const size_t end = rest.find('\0');
      const std::string_view entry = rest.substr(0, end);
      rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
      const size_t eq = entry.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string key(entry.substr(0, eq));
      const auto& names = thread_env_names();
      if (std::find(names.begin(), names.end(), key) != names.end()) {
        p.thread_env[key] = std::string(entry.substr(eq + 1));
      }
    }
  }
  if (std::optional<std::string> limits = fs.read(proc_path(pid, "limits"))) {
    std::istringstream lines(*limits);
    for (std::string line; std::getline(lines, line);) {
      if (!starts_with(line, "Max open files")) continue;
      std::istringstream words(line.substr(std::strlen("Max open files")));
      std::string soft;
      std::string hard;
      words >> soft >> hard;
      const auto number = [](const std::string& s) -> std::optional<int64_t> {
        if (s == "unlimited") return -1;
        return parse_int(s);
      };
      p.nofile_soft = number(soft);
      p.nofile_hard = number(hard);
    }
  }
  return p;
}

// A memory limit as cgroups write "none": v2's "max", v1's page-rounded 2^63.
std::optional<int64_t> memory_limit(std::optional<std::string> text) {
  if (!text || *text == "max") return std::nullopt;
  std::optional<int64_t> bytes = parse_int(*text);
  if (bytes && *bytes >= (int64_t{1} << 62)) return std::nullopt;
  return bytes;
}

// The memory limit and CPU quota of `pid`'s cgroup: v2 (one "0::PATH" line), else v1's memory
// and cpu hierarchies.
void read_cgroup_limits(const HostFs& fs, const std::string& pid, MemoryInfo& m) {
  const std::optional<std::string> lines = fs.read(fmt::format("/proc/{}/cgroup", pid));
  if (!lines) return;
  m.cgroup_readable = true;
  std::istringstream in(*lines);
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string hierarchy = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    if (hierarchy == "0" && controllers.empty()) {
      const std::string dir = fmt::format("/sys/fs/cgroup{}", path);
      if (!fs.exists(dir + "/memory.max")) continue;
      m.cgroup_memory_max_bytes = memory_limit(fs.read_line(dir + "/memory.max"));
      if (std::optional<std::string> cpu = fs.read_line(dir + "/cpu.max")) {
        std::istringstream fields(*cpu);
        std::string quota, period;
        fields >> quota >> period;
        const std::optional<int64_t> q = parse_int(quota), t = parse_int(period);
        if (q && t && *q > 0 && *t > 0) {
          m.cgroup_cpu_quota = static_cast<double>(*q) / static_cast<double>(*t);
        }
      }
      return;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) {
      if (name == "memory") {
        m.cgroup_memory_max_bytes = memory_limit(
            fs.read_line(fmt::format("/sys/fs/cgroup/memory{}/memory.limit_in_bytes", path)));
      } else if (name == "cpu") {
        const std::string dir = fmt::format("/sys/fs/cgroup/{}{}", controllers, path);
        const std::optional<int64_t> q = fs.read_int(dir + "/cpu.cfs_quota_us");
        const std::optional<int64_t> t = fs.read_int(dir + "/cpu.cfs_period_us");
        if (q && t && *q > 0 && *t > 0) {
          m.cgroup_cpu_quota = static_cast<double>(*q) / static_cast<double>(*t);
        }
      }
    }
  }
}

MemoryInfo read_memory(const HostFs& fs, const std::string& pid) {
  MemoryInfo m;
  if (std::optional<std::string> meminfo = fs.read("/proc/meminfo")) {
    m.total_bytes = meminfo_bytes(*meminfo, "MemTotal");
    m.available_bytes = meminfo_bytes(*meminfo, "MemAvailable");
    m.swap_total_bytes = meminfo_bytes(*meminfo, "SwapTotal");
    m.commit_limit_bytes = meminfo_bytes(*meminfo, "CommitLimit");
    m.committed_as_bytes = meminfo_bytes(*meminfo, "Committed_AS");
  }
  m.shm = fs.space("/dev/shm");
  m.overcommit_memory = fs.read_int("/proc/sys/vm/overcommit_memory");
  m.max_map_count = fs.read_int("/proc/sys/vm/max_map_count");
  read_cgroup_limits(fs, pid, m);
  return m;
}

}  // namespace

std::string process_label(const ProcessInfo& p) {
  if (p.pid == "self") return "this process";
  return p.name.empty() ? fmt::format("process {}", p.pid)
                        : fmt::format("process {} ({})", p.pid, p.name);
}

const std::vector<std::string>& thread_env_names() {
  static const std::vector<std::string> kNames = {
      "OMP_NUM_THREADS", "MKL_NUM_THREADS",   "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
      "OMP_PROC_BIND",   "GOMP_CPU_AFFINITY", "KMP_AFFINITY",         "CUDA_VISIBLE_DEVICES"};
  return kNames;
}

std::optional<int64_t> meminfo_bytes(const std::string& meminfo, const std::string& key) {
  std::istringstream lines(meminfo);
  for (std::string line; std::getline(lines, line);) {
    if (!starts_with(line, key + ":")) continue;
    std::istringstream words(line.substr(key.size() + 1));
    int64_t kib = 0;
    if (!(words >> kib) || kib < 0 || kib > INT64_MAX / kBytesPerKiB) return std::nullopt;
    return kib * kBytesPerKiB;
  }
  return std::nullopt;
}

std::vector<int> read_online_cpus(const HostFs& fs) {
  return read_cpus(fs, fmt::format("{}/online", kCpuDir));
}

std::vector<double> read_cpu_mhz(const HostFs& fs, const std::vector<int>& cpus) {
  std::vector<double> mhz;
  for (int c : cpus) {
    if (auto khz = fs.read_int(fmt::format("{}/cpu{}/cpufreq/scaling_cur_freq", kCpuDir, c))) {
      mhz.push_back(static_cast<double>(*khz) / 1000.0);
    }
  }
  if (!mhz.empty()) return mhz;
  std::optional<std::string> info = fs.read("/proc/cpuinfo");
  if (!info) return mhz;
  std::istringstream lines(*info);
  for (std::string line; std::getline(lines, line);) {
    if (!starts_with(line, "cpu MHz")) continue;
    try {
      mhz.push_back(std::stod(field_value(line)));
    } catch (const std::exception&) {
    }
  }
  return mhz;
}

std::optional<double> read_one_cpu_mhz(const HostFs& fs, int cpu) {
  if (auto khz = fs.read_int(fmt::format("{}/cpu{}/cpufreq/scaling_cur_freq", kCpuDir, cpu))) {
    return static_cast<double>(*khz) / 1000.0;
  }
  std::optional<std::string> info = fs.read("/proc/cpuinfo");
  if (!info) return std::nullopt;
  std::istringstream lines(*info);
  bool mine = false;
  for (std::string line; std::getline(lines, line);) {
    if (starts_with(line, "processor")) mine = parse_int(field_value(line)) == cpu;
    if (!mine || !starts_with(line, "cpu MHz")) continue;
    try {
      return std::stod(field_value(line));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

HostInfo read_host_info(const HostFs& fs, const std::string& pid) {
  HostInfo info;
  info.cpu = read_cpu(fs, pid);
  info.process = read_process(fs, pid);
  info.memory = read_memory(fs, pid);
  return info;
}

}  // namespace trainfit
