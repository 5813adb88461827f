#include "host/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstring>

namespace trainfit {
namespace {

// nvml.h's types, declared here so that building needs no NVIDIA headers.
using NvmlReturn = int;  // nvmlReturn_t, an int-sized enum
using NvmlDevice = void*;
constexpr NvmlReturn kSuccess = 0;
constexpr NvmlReturn kInsufficientSize = 7;
constexpr unsigned kClockSm = 1;
constexpr unsigned kClockMem = 2;
constexpr unsigned kTemperatureGpu = 0;
constexpr unsigned kNameBytes = 96;
constexpr unsigned kDriverBytes = 80;
constexpr double kMilliwattsPerWatt = 1000.0;

struct NvmlMemory {  // nvmlMemory_t: total, free, used (in that order)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlUtilization {
  unsigned gpu;
  unsigned memory;
};

template <typename Fn>
Fn symbol(void* handle, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* p = dlsym(handle, name)) return reinterpret_cast<Fn>(p);
  }
  return nullptr;
}

}  // namespace

struct Nvml::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle_by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*persistence)(NvmlDevice, int*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*power_limit)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*power_default_limit)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*power_constraints)(NvmlDevice, unsigned*, unsigned*) = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*max_clock)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*pcie_gen)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*pcie_gen_max)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*pcie_width)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*pcie_width_max)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*throttle)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned*, void*) = nullptr;
  size_t process_record_bytes = 0;  // the layout the resolved processes function fills
};

std::string throttle_reason_names(uint64_t reasons) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {kThrottleAppClocks, "applications_clocks"}, {kThrottleSwPowerCap, "sw_power_cap"},
      {kThrottleHwSlowdown, "hw_slowdown"},        {kThrottleSyncBoost, "sync_boost"},
      {kThrottleSwThermal, "sw_thermal"},          {kThrottleHwThermal, "hw_thermal"},
      {kThrottleHwPowerBrake, "hw_power_brake"},   {kThrottleDisplayClock, "display_clock"},
  };
  std::string out;
  for (const auto& [bit, name] : kNames) {
    if ((reasons & bit) == 0) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

NvmlOpen Nvml::open(const std::string& library) {
  const std::string path = library.empty() ? kDefaultLibrary : library;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const bool named = path.find('/') != std::string::npos;
    return {nullptr, named ? fmt::format("cannot load {}", path)
                           : fmt::format("{} not found: no NVIDIA driver", path)};
  }
  auto api = std::make_unique<Api>();
  Api& a = *api;
  using D = NvmlDevice;
  a.init = symbol<NvmlReturn (*)()>(handle, {"nvmlInit_v2", "nvmlInit"});
  a.shutdown = symbol<NvmlReturn (*)()>(handle, {"nvmlShutdown"});
  a.error_string = symbol<const char* (*)(NvmlReturn)>(handle, {"nvmlErrorString"});
  a.driver_version =
      symbol<NvmlReturn (*)(char*, unsigned)>(handle, {"nvmlSystemGetDriverVersion"});
  a.count =
      symbol<NvmlReturn (*)(unsigned*)>(handle, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  a.handle_by_index = symbol<NvmlReturn (*)(unsigned, D*)>(
      handle, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  a.name = symbol<NvmlReturn (*)(D, char*, unsigned)>(handle, {"nvmlDeviceGetName"});
  a.memory = symbol<NvmlReturn (*)(D, NvmlMemory*)>(handle, {"nvmlDeviceGetMemoryInfo"});
  a.persistence = symbol<NvmlReturn (*)(D, int*)>(handle, {"nvmlDeviceGetPersistenceMode"});
  a.power = symbol<NvmlReturn (*)(D, unsigned*)>(handle, {"nvmlDeviceGetPowerUsage"});
  a.power_limit = symbol<NvmlReturn (*)(D, unsigned*)>(handle, {"nvmlDeviceGetEnforcedPowerLimit"});
  a.power_default_limit =
      symbol<NvmlReturn (*)(D, unsigned*)>(handle, {"nvmlDeviceGetPowerManagementDefaultLimit"});
  a.power_constraints = symbol<NvmlReturn (*)(D, unsigned*, unsigned*)>(
      handle, {"nvmlDeviceGetPowerManagementLimitConstraints"});
  a.temperature =
      symbol<NvmlReturn (*)(D, unsigned, unsigned*)>(handle, {"nvmlDeviceGetTemperature"});
  a.utilization =
      symbol<NvmlReturn (*)(D, NvmlUtilization*)>(handle, {"nvmlDeviceGetUtilizationRates"});
  a.clock = symbol<NvmlReturn (*)(D, unsigned, unsigned*)>(handle, {"nvmlDeviceGetClockInfo"});
  a.max_clock =
      symbol<NvmlReturn (*)(D, unsigned, unsigned*)>(handle, {"nvmlDeviceGetMaxClockInfo"});
  a.pcie_gen =
      symbol<NvmlReturn (*)(D, unsigned*)>(handle, {"nvmlDeviceGetCurrPcieLinkGeneration"});
  a.pcie_gen_max =
      symbol<NvmlReturn (*)(D, unsigned*)>(handle, {"nvmlDeviceGetMaxPcieLinkGeneration"});
  a.pcie_width = symbol<NvmlReturn (*)(D, unsigned*)>(handle, {"nvmlDeviceGetCurrPcieLinkWidth"});
  a.pcie_width_max =
      symbol<NvmlReturn (*)(D, unsigned*)>(handle, {"nvmlDeviceGetMaxPcieLinkWidth"});
  a.throttle = symbol<NvmlReturn (*)(D, unsigned long long*)>(
      handle,
      {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  // Process records: _v3 takes the 24-byte layout on most drivers and a 32-byte one on the few
  // that have confidential-compute memory info but no process detail list (nvitop's rule);
  // _v2 takes 24 bytes and the unversioned function 16.
  if ((a.processes = symbol<NvmlReturn (*)(D, unsigned*, void*)>(
           handle, {"nvmlDeviceGetComputeRunningProcesses_v3"}))) {
    const bool wide = dlsym(handle, "nvmlDeviceGetConfComputeMemSizeInfo") != nullptr &&
                      dlsym(handle, "nvmlDeviceGetRunningProcessDetailList") == nullptr;
    a.process_record_bytes = wide ? 32 : 24;
  } else if ((a.processes = symbol<NvmlReturn (*)(D, unsigned*, void*)>(
                  handle, {"nvmlDeviceGetComputeRunningProcesses_v2"}))) {
    a.process_record_bytes = 24;
  } else if ((a.processes = symbol<NvmlReturn (*)(D, unsigned*, void*)>(
                  handle, {"nvmlDeviceGetComputeRunningProcesses"}))) {
    a.process_record_bytes = 16;
  }
  if (a.init == nullptr || a.count == nullptr || a.handle_by_index == nullptr) {
    dlclose(handle);
    return {nullptr, fmt::format("{} lacks nvmlInit or device enumeration", path)};
  }
  const NvmlReturn init = a.init();
  if (init != kSuccess) {
    std::string why = a.error_string != nullptr && a.error_string(init) != nullptr
                          ? a.error_string(init)
                          : fmt::format("error {}", init);
    dlclose(handle);
    return {nullptr, fmt::format("nvmlInit failed: {}", why)};
  }
  std::unique_ptr<Nvml> nvml(new Nvml(handle, std::move(api)));
  return {std::move(nvml), ""};
}

Nvml::Nvml(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {
  unsigned n = 0;
  if (api_->count(&n) == kSuccess) count_ = static_cast<int>(n);
  if (api_->driver_version != nullptr) {
    char buf[kDriverBytes] = {};
    if (api_->driver_version(buf, sizeof buf) == kSuccess)
      driver_.assign(buf, strnlen(buf, sizeof buf));
  }
}

Nvml::~Nvml() {
  if (api_->shutdown != nullptr) api_->shutdown();
  dlclose(handle_);
}

GpuStatus Nvml::read(int index) const {
  GpuStatus g;
  g.index = index;
  const Api& a = *api_;
  NvmlDevice dev = nullptr;
  if (a.handle_by_index(static_cast<unsigned>(index), &dev) != kSuccess) return g;
  const auto get = [dev](auto fn, auto&... out) {
    return fn != nullptr && fn(dev, &out...) == kSuccess;
  };
  unsigned u = 0;
  unsigned v = 0;
  if (a.name != nullptr) {
    char buf[kNameBytes] = {};
    if (a.name(dev, buf, sizeof buf) == kSuccess) g.name.assign(buf, strnlen(buf, sizeof buf));
  }
  NvmlMemory mem{};
  if (get(a.memory, mem)) {
    g.memory_total_bytes = static_cast<int64_t>(mem.total);
    g.memory_used_bytes = static_cast<int64_t>(mem.used);
  }
  int persistence = 0;
  if (get(a.persistence, persistence)) g.persistence = persistence != 0;
  if (get(a.power, u)) g.power_w = u / kMilliwattsPerWatt;
  if (get(a.power_limit, u)) g.power_limit_w = u / kMilliwattsPerWatt;
  if (get(a.power_default_limit, u)) g.power_default_limit_w = u / kMilliwattsPerWatt;
  if (a.power_constraints != nullptr && a.power_constraints(dev, &u, &v) == kSuccess) {
    g.power_max_limit_w = v / kMilliwattsPerWatt;
  }
  if (a.temperature != nullptr && a.temperature(dev, kTemperatureGpu, &u) == kSuccess) {
    g.temperature_c = static_cast<int>(u);
  }
  NvmlUtilization util{};
  if (get(a.utilization, util)) {
    g.util_gpu_pct = static_cast<int>(util.gpu);
    g.util_mem_pct = static_cast<int>(util.memory);
  }
  const auto clock = [dev](auto fn, unsigned type) -> std::optional<int> {
    unsigned mhz = 0;
    if (fn == nullptr || fn(dev, type, &mhz) != kSuccess) return std::nullopt;
    return static_cast<int>(mhz);
  };
  g.sm_mhz = clock(a.clock, kClockSm);
  g.sm_max_mhz = clock(a.max_clock, kClockSm);
  g.mem_mhz = clock(a.clock, kClockMem);
  g.mem_max_mhz = clock(a.max_clock, kClockMem);
  if (get(a.pcie_gen, u)) g.pcie_gen = static_cast<int>(u);
  if (get(a.pcie_gen_max, u)) g.pcie_gen_max = static_cast<int>(u);
  if (get(a.pcie_width, u)) g.pcie_width = static_cast<int>(u);
  if (get(a.pcie_width_max, u)) g.pcie_width_max = static_cast<int>(u);
  unsigned long long reasons = 0;
  if (get(a.throttle, reasons)) g.throttle_reasons = reasons;
  if (a.processes != nullptr) {
    // Ask for the count, then read with slack for processes that start in between.
    unsigned n = 0;
    NvmlReturn r = a.processes(dev, &n, nullptr);
    if (r == kInsufficientSize || (r == kSuccess && n > 0)) {
      n = n * 2 + 5;
      std::vector<unsigned char> records(n * a.process_record_bytes);
      if (a.processes(dev, &n, records.data()) == kSuccess) {
        for (unsigned i = 0; i < n; ++i) {
          const unsigned char* rec = records.data() + i * a.process_record_bytes;
          GpuProcess p;
          std::memcpy(&p.pid, rec, sizeof p.pid);
          unsigned long long used = 0;
          std::memcpy(&used, rec + 8, sizeof used);
          // NVML_VALUE_NOT_AVAILABLE (all ones) when the driver cannot tell (e.g. WSL).
          if (used != ~0ULL) p.used_bytes = static_cast<int64_t>(used);
          g.processes.push_back(p);
        }
      }
    }
  }
  return g;
}

GpuReport read_gpu_report(const HostFs& fs, const std::string& library) {
  GpuReport report;
  NvmlOpen opened = Nvml::open(library);
  if (!opened.nvml) {
    report.error = opened.error;
    return report;
  }
  report.driver = opened.nvml->driver_version();
  for (int i = 0; i < opened.nvml->device_count(); ++i) {
    GpuStatus g = opened.nvml->read(i);
    std::vector<std::string> names;
    for (const GpuProcess& p : g.processes) {
      names.push_back(fs.read_line(fmt::format("/proc/{}/comm", p.pid)).value_or("?"));
    }
    report.gpus.push_back(std::move(g));
    report.process_names.push_back(std::move(names));
  }
  if (report.gpus.empty()) report.error = "NVML reports no GPU";
  return report;
}

}  // namespace trainfit
