// A stand-in for libnvidia-ml.so.1 that the tests build and load with dlopen, as trainfit loads
// the real one. It exports the NVML entry points trainfit resolves, with nvml.h's versioned names
// and C types, and serves one of a few recorded-style machines chosen by FAKE_NVML_SCENARIO at
// nvmlInit:
//
//   desktop_4090    one RTX 4090 at idle: persistence off, PCIe link down-trained at idle
//   server_h100x2   two H100s; the second capped at 500 W of 700 W, on a Gen4 x8 link, power-capped
//   starved         one GPU with a training process whose utilization drops to idle every 4th read
//   steady          one GPU busy on every read (a process that is not starved)
//   init_fails      nvmlInit returns NVML_ERROR_DRIVER_NOT_LOADED
//
// Each nvmlInit reloads the scenario. Utilization advances one step of its pattern per
// nvmlDeviceGetUtilizationRates call.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kUninitialized = 1;
constexpr int kInsufficientSize = 7;
constexpr int kDriverNotLoaded = 9;
constexpr unsigned long long kGiB = 1ULL << 30;

struct FakeProcess {
  unsigned pid;
  unsigned long long used;
};

struct FakeGpu {
  const char* name;
  unsigned long long total, used;
  int persistence;
  unsigned power_mw, limit_mw, default_limit_mw, max_limit_mw;
  unsigned temp_c;
  std::vector<unsigned> util_pattern;  // gpu %, one per read, cycled
  unsigned mem_util;
  unsigned sm_mhz, sm_max_mhz, mem_mhz, mem_max_mhz;
  unsigned gen, gen_max, width, width_max;
  unsigned long long throttle;
  std::vector<FakeProcess> processes;
  size_t reads = 0;
};

std::vector<FakeGpu> g_gpus;
bool g_ready = false;
int g_init_count = 0;  // NVML counts nvmlInit calls; the last nvmlShutdown ends the session

std::vector<FakeGpu> scenario(const std::string& name) {
  const auto self = static_cast<unsigned>(getpid());
  if (name == "desktop_4090") {
    return {{"NVIDIA GeForce RTX 4090",
             24 * kGiB,
             433ULL << 20,
             0,
             21000,
             450000,
             450000,
             600000,
             37,
             {23},
             9,
             645,
             3105,
             405,
             10501,
             1,
             4,
             16,
             16,
             0x1,
             {}}};
  }
  if (name == "server_h100x2") {
    return {{"NVIDIA H100 80GB HBM3",
             80 * kGiB,
             61 * kGiB,
             1,
             612000,
             700000,
             700000,
             700000,
             64,
             {98},
             41,
             1980,
             1980,
             2619,
             2619,
             5,
             5,
             16,
             16,
             0x0,
             {{self, 60 * kGiB}}},
            {"NVIDIA H100 80GB HBM3",
             80 * kGiB,
             61 * kGiB,
             1,
             498000,
             500000,
             700000,
             700000,
             58,
             {97},
             39,
             1410,
             1980,
             2619,
             2619,
             4,
             5,
             8,
             16,
             0x4,
             {{self + 1, 60 * kGiB}}}};
  }
  if (name == "starved" || name == "steady") {
    std::vector<unsigned> pattern = name == "starved" ? std::vector<unsigned>{96, 97, 95, 3}
                                                      : std::vector<unsigned>{97, 98, 96, 97};
    return {{"NVIDIA A100-SXM4-40GB",
             40 * kGiB,
             22 * kGiB,
             1,
             250000,
             400000,
             400000,
             400000,
             55,
             pattern,
             30,
             1410,
             1410,
             1215,
             1215,
             4,
             4,
             16,
             16,
             0x0,
             {{self, 21 * kGiB}}}};
  }
  return {};
}

FakeGpu* device(void* handle) {
  if (!g_ready || handle == nullptr) return nullptr;
  return static_cast<FakeGpu*>(handle);
}

// nvmlClockType_t: 1 is the SM clock, 2 the memory clock; the fake has no others.
int pick_clock(unsigned type, unsigned sm_mhz, unsigned mem_mhz, unsigned* mhz) {
  if (type != 1 && type != 2) return kNotSupported;
  *mhz = type == 1 ? sm_mhz : mem_mhz;
  return kSuccess;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  const char* env = std::getenv("FAKE_NVML_SCENARIO");
  const std::string name = env != nullptr ? env : "desktop_4090";
  if (name == "init_fails") return kDriverNotLoaded;
  g_gpus = scenario(name);
  g_ready = true;
  ++g_init_count;
  return kSuccess;
}

int nvmlShutdown() {
  if (g_init_count == 0) return kUninitialized;
  g_ready = --g_init_count > 0;
  return kSuccess;
}

const char* nvmlErrorString(int result) {
  return result == kDriverNotLoaded ? "Driver Not Loaded" : "Unknown Error";
}

int nvmlSystemGetDriverVersion(char* out, unsigned length) {
  if (!g_ready) return kUninitialized;
  std::strncpy(out, "550.54.15", length);
  return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!g_ready) return kUninitialized;
  *count = static_cast<unsigned>(g_gpus.size());
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** handle) {
  if (!g_ready) return kUninitialized;
  if (index >= g_gpus.size()) return kInvalidArgument;
  *handle = &g_gpus[index];
  return kSuccess;
}

int nvmlDeviceGetName(void* h, char* out, unsigned length) {
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  std::strncpy(out, g->name, length);
  return kSuccess;
}

int nvmlDeviceGetMemoryInfo(void* h, unsigned long long* memory) {  // total, free, used
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  memory[0] = g->total;
  memory[1] = g->total - g->used;
  memory[2] = g->used;
  return kSuccess;
}

int nvmlDeviceGetPersistenceMode(void* h, int* mode) {
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  *mode = g->persistence;
  return kSuccess;
}

#define FAKE_UNSIGNED_GETTER(fn, field)        \
  int fn(void* h, unsigned* out) {             \
    FakeGpu* g = device(h);                    \
    if (g == nullptr) return kInvalidArgument; \
    *out = g->field;                           \
    return kSuccess;                           \
  }
FAKE_UNSIGNED_GETTER(nvmlDeviceGetPowerUsage, power_mw)
FAKE_UNSIGNED_GETTER(nvmlDeviceGetEnforcedPowerLimit, limit_mw)
FAKE_UNSIGNED_GETTER(nvmlDeviceGetPowerManagementDefaultLimit, default_limit_mw)
FAKE_UNSIGNED_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, gen)
FAKE_UNSIGNED_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, gen_max)
FAKE_UNSIGNED_GETTER(nvmlDeviceGetCurrPcieLinkWidth, width)
FAKE_UNSIGNED_GETTER(nvmlDeviceGetMaxPcieLinkWidth, width_max)
#undef FAKE_UNSIGNED_GETTER

int nvmlDeviceGetPowerManagementLimitConstraints(void* h, unsigned* min_mw, unsigned* max_mw) {
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  *min_mw = g->max_limit_mw / 4;
  *max_mw = g->max_limit_mw;
  return kSuccess;
}

int nvmlDeviceGetTemperature(void* h, unsigned sensor, unsigned* celsius) {
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  if (sensor != 0) return kNotSupported;
  *celsius = g->temp_c;
  return kSuccess;
}

int nvmlDeviceGetUtilizationRates(void* h, unsigned* util) {  // gpu, memory
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  util[0] = g->util_pattern[g->reads++ % g->util_pattern.size()];
  util[1] = util[0] == 0 ? 0 : g->mem_util * util[0] / 100;
  return kSuccess;
}

int nvmlDeviceGetClockInfo(void* h, unsigned type, unsigned* mhz) {
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  return pick_clock(type, g->sm_mhz, g->mem_mhz, mhz);
}

int nvmlDeviceGetMaxClockInfo(void* h, unsigned type, unsigned* mhz) {
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  return pick_clock(type, g->sm_max_mhz, g->mem_max_mhz, mhz);
}

int nvmlDeviceGetCurrentClocksEventReasons(void* h, unsigned long long* reasons) {
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  *reasons = g->throttle;
  return kSuccess;
}

// nvmlProcessInfo_v2_t layout: pid @0, usedGpuMemory @8, gpuInstanceId @16, computeInstanceId @20.
int nvmlDeviceGetComputeRunningProcesses_v3(void* h, unsigned* count, void* infos) {
  FakeGpu* g = device(h);
  if (g == nullptr) return kInvalidArgument;
  const auto n = static_cast<unsigned>(g->processes.size());
  if (*count < n || (infos == nullptr && n > 0)) {
    *count = n;
    return kInsufficientSize;
  }
  auto* out = static_cast<unsigned char*>(infos);
  for (unsigned i = 0; i < n; ++i) {
    unsigned char* rec = out + i * 24;
    std::memset(rec, 0xff, 24);
    std::memcpy(rec, &g->processes[i].pid, 4);
    std::memcpy(rec + 8, &g->processes[i].used, 8);
  }
  *count = n;
  return kSuccess;
}

}  // extern "C"
