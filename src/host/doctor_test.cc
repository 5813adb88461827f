// The doctor against recorded machines (tests/data/host/, written by make_fixtures.py) and the
// fake NVML the tests build: each machine gets exactly its expected findings.
#include "host/doctor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/golden_test_util.h"
#include "host/doctor_report.h"

namespace trainfit {
namespace {

std::string fixture(const std::string& name) {
  return std::string(TRAINFIT_TEST_DATA_DIR) + "/host/" + name;
}

GpuReport fake_gpus(const char* scenario, const HostFs& fs) {
  setenv("FAKE_NVML_SCENARIO", scenario, 1);
  return read_gpu_report(fs, TRAINFIT_FAKE_NVML);
}

std::vector<std::pair<std::string, std::string>> ids(const std::vector<Finding>& findings) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Finding& f : findings) {
    out.emplace_back(f.id, severity_name(f.severity));
    EXPECT_FALSE(f.title.empty());
    EXPECT_FALSE(f.why.empty()) << f.id;
  }
  return out;
}

using Expected = std::vector<std::pair<std::string, std::string>>;

TEST(DoctorFixture, IntelHybridDesktopOnPowersave) {
  const HostFs fs(fixture("intel_hybrid"));
  const HostInfo host = read_host_info(fs);
  EXPECT_EQ(host.cpu.model, "12th Gen Intel(R) Core(TM) i7-12700K");
  ASSERT_EQ(host.cpu.policies.size(), 20u);
  EXPECT_EQ(host.cpu.policies[0].driver, "intel_pstate");
  EXPECT_EQ(host.cpu.policies[0].governor, "powersave");
  EXPECT_EQ(host.cpu.policies[0].epp, "balance_performance");
  EXPECT_EQ(host.cpu.policies[19].hw_max_khz, 3800000);
  EXPECT_EQ(host.cpu.policies[19].name, "policy19");  // numeric order, not policy1, policy10...
  EXPECT_EQ(host.cpu.intel_pstate_status, "active");
  EXPECT_EQ(host.cpu.no_turbo, false);
  EXPECT_EQ(format_cpu_list(host.cpu.p_cores), "0-15");
  EXPECT_EQ(format_cpu_list(host.cpu.e_cores), "16-19");
  ASSERT_EQ(host.cpu.idle_states.size(), 6u);
  EXPECT_EQ(host.cpu.idle_states[5].name, "C10");
  EXPECT_EQ(host.cpu.idle_states[5].latency_us, 680);
  EXPECT_FALSE(host.cpu.dma_latency_us.has_value());  // not root: unreadable
  EXPECT_EQ(host.cpu.cur_mhz.size(), 20u);
  EXPECT_EQ(host.process.nofile_soft, 1024);
  EXPECT_EQ(host.process.nofile_hard, 1048576);
  EXPECT_TRUE(host.process.thread_env.empty());
  ASSERT_TRUE(host.memory.shm.has_value());
  EXPECT_EQ(host.memory.shm->total_bytes, int64_t{16} << 30);

  const GpuReport gpus = fake_gpus("desktop_4090", fs);
  ASSERT_TRUE(gpus.error.empty()) << gpus.error;
  EXPECT_EQ(gpus.driver, "550.54.15");
  const std::vector<Finding> findings = diagnose(host, gpus);
  EXPECT_EQ(ids(findings), (Expected{{"cpu.governor", "warning"},
                                     {"proc.nofile", "warning"},
                                     {"cpu.hybrid", "info"},
                                     {"cpu.cstates", "info"},
                                     {"env.threads", "info"},
                                     {"gpu.persistence", "info"}}));
  EXPECT_EQ(findings[0].fix.rfind("sudo cpupower frequency-set -g performance", 0), 0u);
  EXPECT_NE(findings[0].title.find("balance_performance"), std::string::npos);
  EXPECT_EQ(findings[1].fix, "ulimit -n 65536");
  EXPECT_EQ(findings[2].fix, "taskset -c 0-15 python train.py ...");
  EXPECT_NE(findings[2].title.find("16-19"), std::string::npos);
  EXPECT_EQ(findings[4].fix, "export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1");
  EXPECT_EQ(findings[5].fix, "sudo nvidia-smi -i 0 -pm 1");
  expect_golden("doctor_intel_hybrid_rtx4090.txt", doctor_text(host, gpus, findings));
}

TEST(DoctorFixture, AmdServerWithAmdPstate) {
  const HostFs fs(fixture("amd_server"));
  const HostInfo host = read_host_info(fs);
  ASSERT_EQ(host.cpu.policies.size(), 32u);
  EXPECT_EQ(host.cpu.policies[0].driver, "amd-pstate-epp");
  EXPECT_EQ(host.cpu.amd_pstate_status, "active");
  EXPECT_EQ(host.cpu.boost, false);
  EXPECT_TRUE(host.cpu.p_cores.empty());
  EXPECT_EQ(format_cpu_list(host.cpu.affinity), "0-7");
  // cgroup v1 with no memory limit (2^63 rounded down to a page) and no CPU quota (-1).
  EXPECT_TRUE(host.memory.cgroup_readable);
  EXPECT_FALSE(host.memory.cgroup_memory_max_bytes);
  EXPECT_FALSE(host.memory.cgroup_cpu_quota);
  EXPECT_EQ(host.memory.max_map_count, 262144);
  EXPECT_EQ(host.cpu.dma_latency_us, 2000000000);
  EXPECT_EQ(host.cpu.tuned_profile, "throughput-performance");
  EXPECT_EQ(host.process.thread_env.at("OMP_NUM_THREADS"), "32");
  EXPECT_EQ(host.process.thread_env.at("CUDA_VISIBLE_DEVICES"), "0,1");

  const GpuReport gpus = fake_gpus("server_h100x2", fs);
  ASSERT_EQ(gpus.gpus.size(), 2u);
  EXPECT_EQ(gpus.gpus[1].power_limit_w, 500.0);
  EXPECT_EQ(gpus.gpus[1].pcie_width, 8);
  const std::vector<Finding> findings = diagnose(host, gpus);
  EXPECT_EQ(ids(findings), (Expected{{"cpu.turbo", "warning"},
                                     {"env.threads", "warning"},
                                     {"gpu.power_limit", "warning"},
                                     {"gpu.pcie", "warning"},
                                     {"cpu.affinity", "info"},
                                     {"cpu.cstates", "info"},
                                     {"gpu.throttle", "info"}}));
  EXPECT_EQ(findings[0].fix, "echo 1 | sudo tee /sys/devices/system/cpu/cpufreq/boost");
  EXPECT_EQ(findings[1].fix, "export OMP_NUM_THREADS=8");
  EXPECT_EQ(findings[2].fix, "sudo nvidia-smi -i 1 -pl 700");
  EXPECT_NE(findings[3].title.find("Gen4 x8"), std::string::npos);
}

TEST(DoctorFixture, CloudVmWithoutCpufreqOrGpu) {
  const HostFs fs(fixture("cloud_vm"));
  const HostInfo host = read_host_info(fs);
  EXPECT_TRUE(host.cpu.policies.empty());
  EXPECT_TRUE(host.cpu.idle_states.empty());
  EXPECT_EQ(host.cpu.cur_mhz, std::vector<double>(8, 2899.970));  // from /proc/cpuinfo
  const GpuReport gpus = read_gpu_report(fs, "/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(gpus.error, "cannot load /nonexistent/libnvidia-ml.so.1");
  // The container's limits, as `trainfit loader` plans against them.
  EXPECT_EQ(host.memory.overcommit_memory, 2);
  EXPECT_EQ(host.memory.commit_limit_bytes, int64_t{32925286} * 1024);  // 31.4 GiB in kB
  EXPECT_EQ(host.memory.max_map_count, 65530);
  EXPECT_EQ(host.memory.cgroup_memory_max_bytes, int64_t{16} << 30);
  EXPECT_DOUBLE_EQ(host.memory.cgroup_cpu_quota.value_or(0), 4.0);
  const std::vector<Finding> findings = diagnose(host, gpus);
  EXPECT_EQ(ids(findings), (Expected{{"mem.shm", "critical"},
                                     {"mem.overcommit_strict", "warning"},
                                     {"cpu.cpufreq", "info"},
                                     {"gpu.nvml", "info"}}));
  const std::string text = doctor_text(host, gpus, findings);
  EXPECT_NE(text.find("cpufreq     not available (no cpufreq)"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU\n  not available (cannot load"), std::string::npos) << text;
  EXPECT_NE(text.find("--shm-size"), std::string::npos);
  expect_golden("doctor_cloud_vm.txt", text);
}

TEST(DoctorFixture, RunningTrainerByPid) {
  // The Intel desktop's trainer, started with the fixes: pinned to the P-cores, one thread.
  const HostFs fs(fixture("intel_hybrid"));
  const HostInfo host = read_host_info(fs, "4242");
  EXPECT_EQ(host.process.name, "python3");
  EXPECT_EQ(host.process.threads, 23);
  EXPECT_EQ(host.process.open_fds, 12);
  EXPECT_TRUE(host.process.env_readable);
  EXPECT_EQ(host.process.thread_env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(format_cpu_list(host.cpu.affinity), "0-15");
  const GpuReport gpus = fake_gpus("desktop_4090", fs);
  const std::vector<Finding> findings = diagnose(host, gpus);
  // No cpu.hybrid, cpu.affinity or env.threads: those are the fixes this trainer already has.
  EXPECT_EQ(ids(findings), (Expected{{"cpu.governor", "warning"},
                                     {"proc.nofile", "warning"},
                                     {"cpu.cstates", "info"},
                                     {"gpu.persistence", "info"}}));
  EXPECT_EQ(findings[1].title,
            "open-files limit is 1024 (hard 1048576); 12 in use by process 4242 (python3)");
  EXPECT_EQ(findings[1].fix,
            "prlimit --pid 4242 --nofile=65536:   (and ulimit -n 65536 before the next run)");
  const std::string text = doctor_text(host, gpus, findings);
  EXPECT_NE(text.find("20 CPUs (0-19); process 4242 (python3) may use 0-15"), std::string::npos)
      << text;
  EXPECT_NE(text.find("open files  1024 (hard 1048576), 12 in use"), std::string::npos) << text;
  EXPECT_NE(text.find("process     4242 (python3), 23 threads"), std::string::npos) << text;
  const nlohmann::json j = doctor_json(host, gpus, findings);
  EXPECT_EQ(j["process"]["pid"], 4242);
  EXPECT_EQ(j["process"]["open_fds"], 12);
  EXPECT_EQ(j["process"]["thread_env"]["MKL_NUM_THREADS"], "1");
}

TEST(DoctorFixture, AnotherUsersProcessHidesItsEnvironment) {
  const HostFs fs(fixture("intel_hybrid"));
  const HostInfo host = read_host_info(fs, "4343");
  EXPECT_FALSE(host.process.env_readable);
  EXPECT_FALSE(host.process.open_fds.has_value());
  const GpuReport gpus = fake_gpus("desktop_4090", fs);
  const std::vector<Finding> findings = diagnose(host, gpus);
  // Unset variables cannot be told from unreadable ones, so env.threads says nothing.
  EXPECT_EQ(ids(findings), (Expected{{"cpu.governor", "warning"},
                                     {"proc.nofile", "warning"},
                                     {"cpu.hybrid", "info"},
                                     {"cpu.cstates", "info"},
                                     {"gpu.persistence", "info"}}));
  EXPECT_EQ(
      findings[2].title.rfind("hybrid CPU: process 4343 (python3) may run on E-cores 16-19", 0),
      0u);
  const std::string text = doctor_text(host, gpus, findings);
  EXPECT_NE(text.find("env         not available (only the process's owner or root can read "
                      "/proc/4343/environ)"),
            std::string::npos)
      << text;
  EXPECT_EQ(doctor_json(host, gpus, findings)["process"]["open_fds"], nullptr);
}

TEST(Doctor, OpenFilesNearTheLimit) {
  // A trainer with a generous limit is still flagged when its descriptors approach it.
  const auto judge = [](int64_t open_fds) {
    HostInfo host;
    host.process.pid = "77";
    host.process.env_readable = true;
    host.process.thread_env["OMP_NUM_THREADS"] = "1";
    host.process.nofile_soft = 65536;
    host.process.nofile_hard = 65536;
    host.process.open_fds = open_fds;
    GpuReport gpus;
    gpus.error = "none";
    for (const Finding& f : diagnose(host, gpus)) {
      if (f.id == "proc.nofile") return std::string(severity_name(f.severity)) + ": " + f.fix;
    }
    return std::string("none");
  };
  EXPECT_EQ(judge(50000), "none");  // 76%
  const std::string fix =
      "raise nofile in /etc/security/limits.conf, or "
      "torch.multiprocessing.set_sharing_strategy('file_system')";
  EXPECT_EQ(judge(53000), "warning: " + fix);   // 81%: the hard limit leaves no room
  EXPECT_EQ(judge(60000), "critical: " + fix);  // 92%
}

TEST(DoctorFixture, JsonHasEveryFindingAndSection) {
  const HostFs fs(fixture("amd_server"));
  const HostInfo host = read_host_info(fs);
  const GpuReport gpus = fake_gpus("server_h100x2", fs);
  const std::vector<Finding> findings = diagnose(host, gpus);
  const nlohmann::json j = doctor_json(host, gpus, findings);
  EXPECT_EQ(j["findings"].size(), findings.size());
  EXPECT_EQ(j["cpu"]["policies"].size(), 32u);
  EXPECT_EQ(j["cpu"]["boost"], false);
  EXPECT_EQ(j["gpu"]["available"], true);
  EXPECT_EQ(j["gpu"]["gpus"][1]["throttle_reasons"], "sw_power_cap");
  EXPECT_EQ(j["memory"]["shm_total_bytes"], int64_t{189} << 30);
}

TEST(Doctor, GenericPowersaveIsCritical) {
  HostInfo host;
  CpuPolicy p;
  p.name = "policy0";
  p.cpus = {0};
  p.driver = "acpi-cpufreq";
  p.governor = "powersave";
  host.cpu.policies = {p};
  GpuReport gpus;
  gpus.error = "none";
  const std::vector<Finding> f = diagnose(host, gpus);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].id, "cpu.governor");
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  // intel_pstate's own powersave with EPP performance keeps the clock: only information.
  host.cpu.policies[0].driver = "intel_pstate";
  host.cpu.policies[0].epp = "performance";
  EXPECT_EQ(diagnose(host, gpus)[0].severity, Severity::kInfo);
  // schedutil follows load: the seed's symptom.
  host.cpu.policies[0].driver = "intel_cpufreq";
  host.cpu.policies[0].governor = "schedutil";
  EXPECT_EQ(diagnose(host, gpus)[0].severity, Severity::kWarning);
}

TEST(Doctor, HeldPmQosSilencesIdleStates) {
  HostInfo host;
  host.cpu.idle_states = {{"C1", 1, 1, false}, {"C6", 170, 600, false}};
  GpuReport gpus;
  gpus.error = "none";
  const auto has = [&](const char* id) {
    for (const Finding& f : diagnose(host, gpus)) {
      if (f.id == id) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("cpu.cstates"));
  host.cpu.dma_latency_us = 0;
  EXPECT_FALSE(has("cpu.cstates"));
  host.cpu.dma_latency_us.reset();
  host.cpu.idle_states[1].disabled = true;
  EXPECT_FALSE(has("cpu.cstates"));
}

TEST(DoctorNvml, InitFailureIsAReasonNotACrash) {
  const HostFs fs(fixture("cloud_vm"));
  const GpuReport gpus = fake_gpus("init_fails", fs);
  EXPECT_EQ(gpus.error, "nvmlInit failed: Driver Not Loaded");
  EXPECT_TRUE(gpus.gpus.empty());
}

TEST(DoctorNvml, ReadsEveryMetricOfTheFake) {
  setenv("FAKE_NVML_SCENARIO", "desktop_4090", 1);
  NvmlOpen opened = Nvml::open(TRAINFIT_FAKE_NVML);
  ASSERT_TRUE(opened.nvml) << opened.error;
  ASSERT_EQ(opened.nvml->device_count(), 1);
  const GpuStatus g = opened.nvml->read(0);
  EXPECT_EQ(g.name, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(g.memory_total_bytes, int64_t{24} << 30);
  EXPECT_EQ(g.memory_used_bytes, int64_t{433} << 20);
  EXPECT_EQ(g.persistence, false);
  EXPECT_EQ(g.power_w, 21.0);
  EXPECT_EQ(g.power_limit_w, 450.0);
  EXPECT_EQ(g.power_default_limit_w, 450.0);
  EXPECT_EQ(g.power_max_limit_w, 600.0);
  EXPECT_EQ(g.temperature_c, 37);
  EXPECT_EQ(g.util_gpu_pct, 23);
  EXPECT_EQ(g.sm_mhz, 645);
  EXPECT_EQ(g.sm_max_mhz, 3105);
  EXPECT_EQ(g.mem_max_mhz, 10501);
  EXPECT_EQ(g.pcie_gen, 1);
  EXPECT_EQ(g.pcie_gen_max, 4);
  EXPECT_EQ(g.throttle_reasons, kThrottleGpuIdle);
  EXPECT_TRUE(g.processes.empty());
  setenv("FAKE_NVML_SCENARIO", "starved", 1);
  opened = Nvml::open(TRAINFIT_FAKE_NVML);
  ASSERT_TRUE(opened.nvml);
  const GpuStatus s = opened.nvml->read(0);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(s.processes[0].used_bytes, int64_t{21} << 30);
}

TEST(DoctorNvml, ThrottleNames) {
  EXPECT_EQ(throttle_reason_names(0), "");
  EXPECT_EQ(throttle_reason_names(kThrottleGpuIdle), "");
  EXPECT_EQ(throttle_reason_names(kThrottleSwPowerCap | kThrottleHwThermal),
            "sw_power_cap, hw_thermal");
}

// Every kind of file the doctor reads, truncated, emptied or replaced by garbage: the snapshot
// loses that value and the report still renders.
TEST(DoctorFixture, SurvivesTruncatedAndGarbageFiles) {
  namespace fs = std::filesystem;
  const fs::path tmp =
      fs::temp_directory_path() / ("trainfit_doctor_garbage_" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::copy(fixture("intel_hybrid"), tmp, fs::copy_options::recursive);
  const std::vector<std::string> files = {
      "proc/cpuinfo",
      "proc/meminfo",
      "proc/self/status",
      "proc/self/environ",
      "proc/self/limits",
      "proc/4242/status",
      "proc/4242/environ",
      "proc/4242/limits",
      "statvfs",
      "sys/devices/system/cpu/online",
      "sys/devices/cpu_core/cpus",
      "sys/devices/cpu_atom/cpus",
      "sys/devices/system/cpu/intel_pstate/no_turbo",
      "sys/devices/system/cpu/cpufreq/policy0/affected_cpus",
      "sys/devices/system/cpu/cpufreq/policy0/scaling_governor",
      "sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq",
      "sys/devices/system/cpu/cpufreq/policy0/cpuinfo_max_freq",
      "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq",
      "sys/devices/system/cpu/cpu0/cpuidle/state3/latency",
      "sys/devices/system/cpu/cpu0/cpuidle/state3/name",
  };
  std::mt19937 random(7);
  for (const std::string& file : files) {
    const fs::path path = tmp / file;
    std::string original;
    {
      std::ifstream in(path, std::ios::binary);
      original.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::string garbage(64, '\0');
    for (char& c : garbage) c = static_cast<char>(random());
    for (const std::string& bad :
         {original.substr(0, original.size() / 2), std::string(), garbage,
          std::string("-99999999999999999999999\n"), std::string("0-4294967296,\n")}) {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
      const HostFs host_fs(tmp.string());
      for (const char* pid : {"self", "4242"}) {
        const HostInfo host = read_host_info(host_fs, pid);
        GpuReport gpus;
        gpus.error = "none";
        const std::vector<Finding> findings = diagnose(host, gpus);
        EXPECT_EQ(doctor_text(host, gpus, findings).rfind("trainfit doctor: ", 0), 0u) << file;
        const std::string json = json_text(doctor_json(host, gpus, findings));
        EXPECT_TRUE(nlohmann::json::accept(json)) << file << ": " << json;
      }
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << original;
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace trainfit
