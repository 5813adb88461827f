// NVIDIA GPUs through NVML, opened with dlopen so that trainfit runs where there is no driver.
//
//   NvmlOpen opened = Nvml::open();            // libnvidia-ml.so.1, or a path (tests: a fake)
//   if (!opened.nvml) print(opened.error);     // "libnvidia-ml.so.1 not found", ...
//   for (int i = 0; i < opened.nvml->device_count(); ++i) GpuStatus g = opened.nvml->read(i);
//   GpuReport all = read_gpu_report(HostFs("/"), "");  // every GPU at once, with process names
//
// Every metric is optional: a driver that does not support one (or a missing symbol) leaves it
// empty, and the report says "not available". Symbols are resolved by their versioned export
// names (nvmlInit_v2 ...) with the older names as fallbacks, as nvml.h's macros would.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host/host_fs.h"

namespace trainfit {

struct GpuProcess {
  uint32_t pid = 0;
  std::optional<int64_t> used_bytes;
};

struct GpuStatus {
  int index = 0;
  std::string name;
  std::optional<int64_t> memory_total_bytes;
  std::optional<int64_t> memory_used_bytes;
  std::optional<bool> persistence;
  std::optional<double> power_w;                // draw
  std::optional<double> power_limit_w;          // enforced
  std::optional<double> power_default_limit_w;  // the board's default
  std::optional<double> power_max_limit_w;      // the most it can be set to
  std::optional<int> temperature_c;
  std::optional<int> util_gpu_pct;  // time a kernel ran, over NVML's sample period
  std::optional<int> util_mem_pct;
  std::optional<int> sm_mhz;
  std::optional<int> sm_max_mhz;
  std::optional<int> mem_mhz;
  std::optional<int> mem_max_mhz;
  std::optional<int> pcie_gen;
  std::optional<int> pcie_gen_max;
  std::optional<int> pcie_width;
  std::optional<int> pcie_width_max;
  std::optional<uint64_t> throttle_reasons;  // nvmlClocksEventReason bits
  std::vector<GpuProcess> processes;         // compute processes
};

// Clock event (throttle) reason bits, from nvml.h.
inline constexpr uint64_t kThrottleGpuIdle = 0x1;
inline constexpr uint64_t kThrottleAppClocks = 0x2;
inline constexpr uint64_t kThrottleSwPowerCap = 0x4;
inline constexpr uint64_t kThrottleHwSlowdown = 0x8;
inline constexpr uint64_t kThrottleSyncBoost = 0x10;
inline constexpr uint64_t kThrottleSwThermal = 0x20;
inline constexpr uint64_t kThrottleHwThermal = 0x40;
inline constexpr uint64_t kThrottleHwPowerBrake = 0x80;
inline constexpr uint64_t kThrottleDisplayClock = 0x100;

// "sw_power_cap, hw_thermal"; "" for none (GpuIdle is not a throttle and is left out).
std::string throttle_reason_names(uint64_t reasons);

class Nvml;

struct NvmlOpen {
  std::unique_ptr<Nvml> nvml;  // null when NVML cannot be used
  std::string error;           // why, in a few words
};

class Nvml {
 public:
  static constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";

  // Loads `library` ("" = the default), resolves its symbols and calls nvmlInit.
  static NvmlOpen open(const std::string& library = "");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  int device_count() const { return count_; }
  const std::string& driver_version() const { return driver_; }
  // Reads every metric of device `index` (0 <= index < device_count()).
  GpuStatus read(int index) const;

  struct Api;  // resolved entry points (nvml.cc)

 private:
  Nvml(void* handle, std::unique_ptr<Api> api);
  void* handle_;
  std::unique_ptr<Api> api_;
  int count_ = 0;
  std::string driver_;
};

// The GPUs as NVML reports them, or why there are none.
struct GpuReport {
  std::string error;  // "" when NVML was read
  std::string driver;
  std::vector<GpuStatus> gpus;
  std::vector<std::vector<std::string>> process_names;  // per GPU, per process: /proc/PID/comm
};

// NVML from `library` ("" = libnvidia-ml.so.1); process names from `fs`.
GpuReport read_gpu_report(const HostFs& fs, const std::string& library);

}  // namespace trainfit
