#include "plan/loader_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace trainfit {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kImageBytes = 32LL * 3 * 224 * 224 * 4;  // a batch of 32 float32 images
constexpr int64_t kLabelBytes = int64_t{32} * 4;

ProcessMemory memory(int64_t uss) {
  ProcessMemory m;
  m.pss_bytes = m.uss_bytes = m.rss_bytes = m.anon_bytes = uss;
  m.vm_size_bytes = 4 * kGiB;
  m.vm_data_bytes = kGiB;
  m.open_fds = 10;
  m.maps = 1000;
  return m;
}

WorkerRun run(int64_t workers, double samples_per_s) {
  WorkerRun r;
  r.num_workers = workers;
  r.batches = 100;
  r.seconds = 5;
  r.samples_per_s = samples_per_s;
  r.first_batch_s = 0.5;
  for (int64_t i = 0; i < workers; ++i) r.workers.push_back({memory(20 * kMiB), memory(20 * kMiB)});
  return r;
}

// Eight cores; 5 ms a sample; measured 190 samples/s in process, 180 with one worker, 360 with
// two and 700 with four; batches of 32 images and 32 labels.
LoaderProfile profile() {
  LoaderProfile p;
  p.source = "test.json";
  p.dataset = "test:make";
  p.length = 6400;
  p.batch_size = 32;
  p.host.logical_cpus = 8;
  p.host.affinity = {0, 1, 2, 3, 4, 5, 6, 7};
  p.host.physical_cores = 8;
  p.host.mem_available_bytes = 16 * kGiB;
  p.host.committed_as_bytes = kGiB;
  p.host.overcommit_memory = 0;
  p.host.shm_total_bytes = p.host.shm_free_bytes = 8 * kGiB;
  p.host.nofile_soft = 1024;
  p.host.nofile_hard = 4096;
  p.host.max_map_count = 65530;
  p.host.start_method = "fork";
  p.host.sharing_strategy = "file_descriptor";
  p.main = memory(400 * kMiB);
  p.fetch = {64, 0.005, 0.005, 0.0055, 0.006, 0.006};
  p.batch.size = 32;
  p.batch.collate = {20, 0, 0, 0, 0, 0};
  p.batch.tensors = 2;
  p.batch.tensor_bytes = {kImageBytes, kLabelBytes};
  p.batch.bytes = p.batch.storage_bytes = kImageBytes + kLabelBytes;
  p.runs = {run(0, 190), run(1, 180), run(2, 360), run(4, 700)};
  return p;
}

LoaderRequest at_rate(double samples_per_s, int64_t batch = 32) {
  LoaderRequest r;
  r.batch = batch;
  r.step_time_s = static_cast<double>(batch) / samples_per_s;
  r.step_time_from = "given";
  return r;
}

bool has_warning(const LoaderPlan& plan, const std::string& code) {
  return std::any_of(plan.warnings.begin(), plan.warnings.end(),
                     [&](const LoaderWarning& w) { return w.code == code; });
}

const LoaderWarning& warning(const LoaderPlan& plan, const std::string& code) {
  return *std::find_if(plan.warnings.begin(), plan.warnings.end(),
                       [&](const LoaderWarning& w) { return w.code == code; });
}

double rate_at(const LoaderPlan& plan, int64_t workers) {
  for (const WorkerPoint& w : plan.curve) {
    if (w.num_workers == workers) return w.samples_per_s;
  }
  return -1;
}

TEST(LoaderPlan, ChoosesTheFewestWorkersThatFeedTheGpuWithHeadroom) {
  // 320 samples/s with 10% headroom is 352: two workers (360) deliver it, one (180) does not.
  Result<LoaderPlan> plan = plan_loader(profile(), at_rate(320));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_TRUE(plan->chosen);
  EXPECT_EQ(plan->num_workers, 2);
  EXPECT_EQ(plan->prefetch_factor, 2);
  EXPECT_TRUE(plan->pin_memory);
  EXPECT_TRUE(plan->persistent_workers);
  EXPECT_DOUBLE_EQ(plan->loader_samples_per_s, 360);
  EXPECT_DOUBLE_EQ(plan->samples_per_s, 320);
  EXPECT_EQ(plan->bottleneck, "gpu");
  EXPECT_DOUBLE_EQ(*plan->epoch_s, 6400.0 / 320);
  EXPECT_TRUE(plan->warnings.empty()) << plan->warnings[0].message;
}

TEST(LoaderPlan, InterpolatesBetweenRunsAndScalesByCoresBeyondThem) {
  Result<LoaderPlan> plan = plan_loader(profile(), at_rate(320));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->curve.size(), 9u);  // 0 to the 8 cores
  EXPECT_TRUE(plan->curve[4].measured);
  EXPECT_FALSE(plan->curve[3].measured);
  EXPECT_DOUBLE_EQ(rate_at(*plan, 3), (360 + 700) / 2.0);
  EXPECT_DOUBLE_EQ(rate_at(*plan, 6), 700 * 6 / 4.0);
  EXPECT_DOUBLE_EQ(rate_at(*plan, 8), 700 * 8 / 4.0);
}

TEST(LoaderPlan, ALargerBatchCarriesTheSendingCostOverMoreSamples) {
  // 5 ms a sample, 2 tensors x 0.25 ms a batch from a worker: 64/(64 x 5 ms + 0.5 ms) against
  // 32/(32 x 5 ms + 0.5 ms) samples/s.
  Result<LoaderPlan> plan = plan_loader(profile(), at_rate(320, 64));
  ASSERT_TRUE(plan.ok());
  const double factor = (64 / (64 * 0.005 + 0.0005)) / (32 / (32 * 0.005 + 0.0005));
  EXPECT_NEAR(rate_at(*plan, 2), 360 * factor, 1e-9);
  EXPECT_DOUBLE_EQ(rate_at(*plan, 0), 190);  // no sending in process
}

TEST(LoaderPlan, ALoaderSlowerThanTheGpuIsTheBottleneckAndSaysWhy) {
  Result<LoaderPlan> plan = plan_loader(profile(), at_rate(1500));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_workers, 8);
  EXPECT_DOUBLE_EQ(plan->loader_samples_per_s, 1400);
  EXPECT_EQ(plan->bottleneck, "loader");
  ASSERT_TRUE(has_warning(*plan, "loader_bottleneck"));
  EXPECT_NE(warning(*plan, "loader_bottleneck").fix.find("the 8 cores are the limit"),
            std::string::npos);
  EXPECT_NE(warning(*plan, "loader_bottleneck").message.find("waits 7%"), std::string::npos);
}

TEST(LoaderPlan, FewerCoresWhereTheRunWillBe) {
  LoaderRequest r = at_rate(1500);
  r.host.cpus = 2;
  Result<LoaderPlan> plan = plan_loader(profile(), r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->usable_cores, 2);
  EXPECT_EQ(plan->num_workers, 2);
}

TEST(LoaderPlan, LoadsInTheTrainingProcessOnlyWhenItCostsTheStepLittle) {
  LoaderProfile p = profile();
  p.runs[0].samples_per_s = 100000;  // 0.32 ms a batch against a 100 ms step
  Result<LoaderPlan> plan = plan_loader(p, at_rate(320));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_workers, 0);
  EXPECT_FALSE(plan->prefetch_factor);
  EXPECT_FALSE(plan->persistent_workers);
  EXPECT_EQ(plan->memory.shm_bytes, 0);
  EXPECT_TRUE(plan->env.empty());
}

TEST(LoaderPlan, BatchesInFlightSharedAndPinned) {
  Result<LoaderPlan> plan = plan_loader(profile(), at_rate(320));
  ASSERT_TRUE(plan.ok());
  const LoaderMemory& m = plan->memory;
  const int64_t batch = kImageBytes + kLabelBytes;
  EXPECT_EQ(m.batch_bytes, batch);
  EXPECT_EQ(m.batches_in_flight, 2 * 2 + 1);
  EXPECT_EQ(m.shm_bytes, int64_t{2} * 2 * batch);  // pinned batches have left /dev/shm
  // The host allocator rounds each tensor up to a power of two.
  EXPECT_EQ(m.pinned_bytes, 5 * (int64_t{32} * kMiB + 128));
  EXPECT_EQ(m.worker_own_bytes, 20 * kMiB);
  EXPECT_EQ(m.host_ram_bytes, 400 * kMiB + int64_t{2} * 20 * kMiB + m.shm_bytes + m.pinned_bytes);
  EXPECT_EQ(m.open_fds, 10 + 2 * 4 + 2 * 5);
  EXPECT_EQ(m.maps, 1000 + 2 * 5);

  LoaderRequest unpinned = at_rate(320);
  unpinned.given.pin_memory = false;
  Result<LoaderPlan> plain = plan_loader(profile(), unpinned);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->memory.shm_bytes, (2 * 2 + 1) * batch);
  EXPECT_EQ(plain->memory.pinned_bytes, 0);
}

// 1 GiB of Python objects, two samples' objects to a page: a worker that read a fraction x of
// the samples copied 1 - (1 - x)^2 of them (in the two-worker run, half: 3/4 GiB).
LoaderProfile with_python_objects() {
  LoaderProfile p = profile();
  p.inventory.python_objects = 20'000'000;
  p.inventory.python_object_bytes = kGiB;
  p.runs[2].batches = 200;  // 200 x 32 / 2 workers = 3200 samples each: half of 6400
  for (WorkerRun& run : p.runs) {
    if (run.num_workers == 0) continue;
    const double read =
        static_cast<double>(run.batches * 32) / static_cast<double>(run.num_workers) / 6400;
    for (WorkerMemory& w : run.workers) {
      w.last->uss_bytes = w.first->uss_bytes + std::llround(kGiB * (1 - (1 - read) * (1 - read)));
    }
  }
  return p;
}

TEST(LoaderPlan, ForkedWorkersCopyThePagesOfThePythonObjectsTheyRead) {
  LoaderRequest r = at_rate(320);
  r.given.num_workers = 4;
  Result<LoaderPlan> plan = plan_loader(with_python_objects(), r);
  ASSERT_TRUE(plan.ok());
  const LoaderMemory& m = plan->memory;
  EXPECT_EQ(m.copyable_bytes, kGiB);
  // First epoch: each of 4 workers reads a quarter: 1 - 0.75^2 = 0.4375 of the pages.
  EXPECT_NEAR(static_cast<double>(m.worker_copy_first_epoch_bytes), 0.4375 * kGiB, 2);
  // Persistent workers read every sample in the end.
  EXPECT_EQ(m.worker_copy_bytes, kGiB);
  const int64_t in_flight = m.shm_bytes + m.pinned_bytes;
  EXPECT_EQ(m.host_ram_bytes, 400 * kMiB + 4 * (20 * kMiB + kGiB) + in_flight);
  EXPECT_EQ(m.host_ram_first_epoch_bytes,
            400 * kMiB + 4 * (20 * kMiB + m.worker_copy_first_epoch_bytes) + in_flight);

  r.given.persistent_workers = false;  // each epoch starts fresh copies
  Result<LoaderPlan> fresh = plan_loader(with_python_objects(), r);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->memory.worker_copy_bytes, fresh->memory.worker_copy_first_epoch_bytes);
  EXPECT_TRUE(has_warning(*fresh, "workers_restart"));
}

TEST(LoaderPlan, SpawnedWorkersCopyNothingAsTheyRead) {
  LoaderProfile p = with_python_objects();
  p.host.start_method = "spawn";
  LoaderRequest r = at_rate(320);
  r.given.num_workers = 4;
  Result<LoaderPlan> plan = plan_loader(p, r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->memory.worker_copy_bytes, 0);
}

TEST(LoaderPlan, TheSeed002FailureIsWarnedBeforeTheRun) {
  // Four workers copying 1 GiB each under a 4 GiB memory limit (a cgroup's).
  LoaderRequest r = at_rate(320);
  r.given.num_workers = 4;
  r.host.memory_limit_bytes = 4 * kGiB;
  Result<LoaderPlan> plan = plan_loader(with_python_objects(), r);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(has_warning(*plan, "cgroup_memory"));
  const LoaderWarning& w = warning(*plan, "cgroup_memory");
  EXPECT_NE(w.message.find("20,000,000 Python objects"), std::string::npos) << w.message;
  EXPECT_NE(w.fix.find("one NumPy array"), std::string::npos);
  // Three workers take 400 MiB + 3 x 1.02 GiB + 110 MiB in /dev/shm + 224 MiB pinned.
  EXPECT_NE(w.fix.find("num_workers=3"), std::string::npos) << w.fix;

  // Chosen, the plan stays within the limit: two workers (the fewest that feed the GPU) fit.
  r.given = {};
  Result<LoaderPlan> chosen = plan_loader(with_python_objects(), r);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->num_workers, 2);
  EXPECT_FALSE(has_warning(*chosen, "cgroup_memory"));
}

TEST(LoaderPlan, CommitLimitUnderStrictOvercommit) {
  // Each fork charges the main process's 1 GiB of private writable memory.
  LoaderRequest r = at_rate(320);
  r.given.num_workers = 4;
  r.host.commit_limit_bytes = 4 * kGiB;
  Result<LoaderPlan> plan = plan_loader(profile(), r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->memory.fork_commit_bytes, kGiB + 4 * kGiB + plan->memory.shm_bytes);
  ASSERT_TRUE(has_warning(*plan, "commit_limit"));
  EXPECT_NE(warning(*plan, "commit_limit").message.find("Cannot allocate memory"),
            std::string::npos);
}

TEST(LoaderPlan, DockersSmallSharedMemory) {
  LoaderRequest r = at_rate(320);
  r.host.shm_bytes = 64 * 1000 * 1000;
  Result<LoaderPlan> plan = plan_loader(profile(), r);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(has_warning(*plan, "shm_small"));
  const LoaderWarning& w = warning(*plan, "shm_small");
  EXPECT_NE(w.message.find("Bus error"), std::string::npos);
  EXPECT_NE(w.fix.find("--shm-size=256MiB"), std::string::npos) << w.fix;  // 2 x 73.5 MiB
}

TEST(LoaderPlan, OpenFileLimitWithTheDescriptorStrategy) {
  LoaderProfile p = profile();
  p.host.nofile_soft = 40;
  LoaderRequest r = at_rate(320);
  r.given.num_workers = 4;  // 10 + 4 x 4 + 2 tensors x 9 batches = 44 descriptors
  Result<LoaderPlan> plan = plan_loader(p, r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->memory.open_fds, 44);
  EXPECT_TRUE(has_warning(*plan, "fd_limit"));
  p.host.sharing_strategy = "file_system";
  Result<LoaderPlan> by_name = plan_loader(p, r);
  ASSERT_TRUE(by_name.ok());
  EXPECT_FALSE(has_warning(*by_name, "fd_limit"));
}

TEST(LoaderPlan, JudgesGivenSettings) {
  LoaderRequest r = at_rate(320);
  r.given.num_workers = 12;
  r.given.prefetch_factor = 4;
  Result<LoaderPlan> plan = plan_loader(profile(), r);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->chosen);
  EXPECT_EQ(plan->num_workers, 12);
  EXPECT_EQ(plan->prefetch_factor, 4);
  EXPECT_EQ(plan->memory.batches_in_flight, 4 * 12 + 1);
  EXPECT_TRUE(has_warning(*plan, "too_many_workers"));
}

TEST(LoaderPlan, ThreadPoolsInEveryWorker) {
  LoaderProfile p = profile();
  p.worker_os_threads = 6;  // 3 beyond the worker's own
  LoaderRequest r = at_rate(320);
  r.given.num_workers = 4;
  Result<LoaderPlan> plan = plan_loader(p, r);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(has_warning(*plan, "thread_oversubscription"));
  p.worker_os_threads = 3;
  Result<LoaderPlan> calm = plan_loader(p, r);
  ASSERT_TRUE(calm.ok());
  EXPECT_FALSE(has_warning(*calm, "thread_oversubscription"));
}

TEST(LoaderPlan, RefusesImpossibleSettings) {
  LoaderRequest r = at_rate(320);
  r.given.num_workers = 0;
  r.given.prefetch_factor = 2;
  EXPECT_FALSE(plan_loader(profile(), r).ok());
  r.given = {};
  r.given.num_workers = 0;
  r.given.persistent_workers = true;
  EXPECT_FALSE(plan_loader(profile(), r).ok());
  r.given = {};
  r.batch = 0;
  EXPECT_FALSE(plan_loader(profile(), r).ok());
  r = at_rate(320);
  r.step_time_s = NAN;
  EXPECT_FALSE(plan_loader(profile(), r).ok());
}

TEST(LoaderPlan, PlansTheRecordedProfileAndAnyMutationOfItThatParses) {
  std::ifstream in(std::string(TRAINFIT_TEST_DATA_DIR) + "/loader/decode.json");
  std::ostringstream read;
  read << in.rdbuf();
  const std::string text = nlohmann::json::parse(read.str()).dump();
  ASSERT_TRUE(parse_loader_profile(text, "decode.json").ok());
  std::mt19937 random(7);
  std::uniform_int_distribution<size_t> where(0, text.size() - 1);
  std::uniform_int_distribution<int> digit('0', '9');
  int planned = 0;
  for (int i = 0; i < 3000; ++i) {
    // Digits for digits: the numbers change, the JSON mostly stays valid.
    std::string mutated = text;
    for (int j = 0; j < 4; ++j) {
      const size_t at = where(random);
      if (std::isdigit(static_cast<unsigned char>(mutated[at]))) {
        mutated[at] = static_cast<char>(digit(random));
      }
    }
    const Result<LoaderProfile> p = parse_loader_profile(mutated, "mutated.json");
    if (!p.ok()) continue;
    for (const int64_t batch : {int64_t{1}, int64_t{32}, int64_t{1} << 30}) {
      LoaderRequest r = at_rate(320, batch);
      const Result<LoaderPlan> plan = plan_loader(*p, r);
      if (!plan.ok()) {
        EXPECT_EQ(plan.status().to_string().find('\n'), std::string::npos);
        continue;
      }
      ++planned;
      EXPECT_GE(plan->memory.host_ram_bytes, plan->memory.main_bytes);
      EXPECT_TRUE(std::isfinite(plan->samples_per_s));
    }
  }
  EXPECT_GT(planned, 1000);
}

}  // namespace
}  // namespace trainfit
