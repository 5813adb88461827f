// doctor, latency and monitor through the command line, in process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace trainfit {
namespace {

std::string fixture(const std::string& name) {
  return std::string(TRAINFIT_TEST_DATA_DIR) + "/host/" + name;
}

void expect_one_line_error(const CliRun& r, const std::string& what) {
  EXPECT_EQ(r.code, kExitBadInput) << what;
  EXPECT_TRUE(r.out.empty()) << what;
  EXPECT_EQ(r.err.rfind("trainfit: error: ", 0), 0u) << what << ": " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << what << ": " << r.err;
}

TEST(DoctorCli, ReportsThisMachine) {
  const CliRun r = run({"doctor"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* part : {"CPU\n", "Memory\n", "GPU", "Findings:", "/dev/shm", "open files"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  const CliRun j = run({"doctor", "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  for (const char* key : {"cpu", "process", "memory", "gpu", "findings"}) {
    EXPECT_TRUE(doc.contains(key)) << key;
  }
  EXPECT_TRUE(doc["gpu"].contains("available"));
}

TEST(DoctorCli, RecordedTreeWithTheFakeNvml) {
  setenv("FAKE_NVML_SCENARIO", "desktop_4090", 1);
  const CliRun r =
      run({"doctor", "--root", fixture("intel_hybrid"), "--nvml", TRAINFIT_FAKE_NVML, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["findings"][0]["id"], "cpu.governor");
  EXPECT_EQ(doc["gpu"]["gpus"][0]["name"], "NVIDIA GeForce RTX 4090");
  const CliRun text =
      run({"doctor", "--root", fixture("intel_hybrid"), "--nvml", TRAINFIT_FAKE_NVML});
  EXPECT_NE(text.out.find("fix: sudo cpupower frequency-set -g performance"), std::string::npos)
      << text.out;
}

TEST(DoctorCli, BadRoot) {
  expect_one_line_error(run({"doctor", "--root", "/nonexistent/tree"}), "missing root");
}

TEST(DoctorCli, JudgesARunningProcessByPid) {
  // This test binary is a live process with descriptors open: the doctor reads it like a trainer.
  const std::string pid = std::to_string(getpid());
  const CliRun j = run({"doctor", "--pid", pid, "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["process"]["pid"], getpid());
  EXPECT_TRUE(doc["process"]["env_readable"]);
  EXPECT_GT(doc["process"]["open_fds"].get<int64_t>(), 2);
  EXPECT_GE(doc["process"]["threads"].get<int64_t>(), 1);
  const CliRun text = run({"doctor", "--pid", pid});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("  process     " + pid + " ("), std::string::npos) << text.out;

  setenv("FAKE_NVML_SCENARIO", "desktop_4090", 1);
  const CliRun recorded = run(
      {"doctor", "--root", fixture("intel_hybrid"), "--nvml", TRAINFIT_FAKE_NVML, "--pid", "4242"});
  ASSERT_EQ(recorded.code, 0) << recorded.err;
  EXPECT_NE(recorded.out.find("fix: prlimit --pid 4242 --nofile=65536:"), std::string::npos)
      << recorded.out;
}

TEST(DoctorCli, BadPid) {
  expect_one_line_error(run({"doctor", "--pid", "abc"}), "not a number");
  expect_one_line_error(run({"doctor", "--pid", "0"}), "zero");
  expect_one_line_error(run({"doctor", "--pid", "-3"}), "negative");
  expect_one_line_error(run({"doctor", "--pid", "99999999999999999999"}), "overflow");
  expect_one_line_error(run({"doctor", "--root", fixture("intel_hybrid"), "--pid", "5"}),
                        "not in the recorded tree");
}

TEST(LatencyCli, RunsBothRatesHere) {
  const CliRun r =
      run({"latency", "--rate", "30", "--rate", "60", "--seconds", "0.5", "--work-ms", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("   30 Hz "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   60 Hz "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verdict\n"), std::string::npos) << r.out;
  const CliRun j =
      run({"latency", "--seconds", "0.3", "--work-ms", "0.5", "--cpus", "0", "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc["rates"].size(), 2u);  // 30 and 60 Hz by default
  EXPECT_EQ(doc["rates"][0]["rate_hz"], 30.0);
  EXPECT_GE(doc["rates"][0]["frames"].get<int>(), 8);
  EXPECT_GT(doc["rates"][1]["work_ms"]["p50"].get<double>(), 0);
  EXPECT_EQ(doc["cpus"], "0");
  EXPECT_FALSE(doc["verdict"].empty());
}

TEST(LatencyCli, BadArguments) {
  expect_one_line_error(run({"latency", "--rate", "0"}), "rate 0");
  expect_one_line_error(run({"latency", "--rate", "-5"}), "negative rate");
  expect_one_line_error(run({"latency", "--rate", "abc"}), "rate text");
  expect_one_line_error(run({"latency", "--work-ms", "0"}), "no work");
  expect_one_line_error(run({"latency", "--seconds", "1e9"}), "too long");
  expect_one_line_error(run({"latency", "--cpus", "9999", "--seconds", "0.1"}), "absent CPU");
  expect_one_line_error(run({"latency", "--cpus", "x-y", "--seconds", "0.1"}), "bad CPU list");
}

TEST(MonitorCli, CpuColumnsWithoutAGpu) {
  const CliRun r = run({"monitor", "--interval", "0.1", "--seconds", "0.3", "--nvml",
                        "/nonexistent/libnvidia-ml.so.1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("CPU columns only"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu_MHz    cpu% ram_GiB"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("sm%"), std::string::npos);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2 + 3) << r.out;  // note, header, rows
  const CliRun csv = run({"monitor", "--interval", "0.1", "--seconds", "0.2", "--csv", "--nvml",
                          "/nonexistent/libnvidia-ml.so.1"});
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("time_s,cpu_MHz,cpu%,ram_GiB\n", 0), 0u) << csv.out;
}

// The fake GPU idles every 4th read. Reads 50 ms apart put the dips 200 ms apart, so a busy
// host's scheduling delays (tens of ms) stay well inside the rhythm's allowed spread.
TEST(MonitorCli, DetectsTheFakeStarvedGpu) {
  setenv("FAKE_NVML_SCENARIO", "starved", 1);
  const CliRun r = run(
      {"monitor", "--nvml", TRAINFIT_FAKE_NVML, "--interval", "0.05", "--seconds", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["gpu_available"], true);
  EXPECT_EQ(doc["samples"].size(), 20u);
  ASSERT_EQ(doc["findings"].size(), 1u);
  EXPECT_EQ(doc["findings"][0]["id"], "gpu.starved");
  const CliRun text =
      run({"monitor", "--nvml", TRAINFIT_FAKE_NVML, "--interval", "0.05", "--seconds", "1"});
  EXPECT_NE(text.out.find("probably waiting for data"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("sm%"), std::string::npos);
}

TEST(MonitorCli, BadArguments) {
  expect_one_line_error(run({"monitor", "--interval", "0"}), "zero interval");
  expect_one_line_error(run({"monitor", "--seconds", "-1"}), "negative seconds");
  expect_one_line_error(run({"monitor", "--csv", "--json", "--seconds", "1"}), "two formats");
  expect_one_line_error(run({"monitor", "--root", "/nonexistent", "--seconds", "1"}), "bad root");
}

}  // namespace
}  // namespace trainfit
