// Speed of the estimate pipeline: graph build, lowering, allocator model, step time. Reported in
// the README's performance section; never asserted in a test.
//
//   cmake --preset release && cmake --build --preset release
//   build/release/trainfit_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "cli/cli.h"
#include "estimate/estimate.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

Estimate run(const std::string& model, int64_t batch,
             std::vector<std::pair<std::string, std::string>> sets = {}) {
  ModelRequest r;
  r.name = model;
  r.batch = batch;
  r.sets = std::move(sets);
  const Result<Graph> g = build_model(r);
  EstimateOptions o;
  o.device = cuda_profile(*find_gpu("a100-80gb"));
  return *estimate(*g, o);
}

// One estimate, end to end, as `trainfit estimate` computes it.
void BM_Estimate(benchmark::State& state, const std::string& model, int64_t batch) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(run(model, batch).peak_reserved_bytes);
  }
}
BENCHMARK_CAPTURE(BM_Estimate, resnet50_batch256, std::string("resnet50"), 256)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Estimate, vit_b_16_batch128, std::string("vit_b_16"), 128)
    ->Unit(benchmark::kMillisecond);

// The stages of one estimate, each alone: building the graph, lowering it to allocation
// events, and replaying those through the allocator model (both replays: central and bound).
ModelRequest stage_request(const std::string& model, int64_t batch) {
  ModelRequest r;
  r.name = model;
  r.batch = batch;
  r.options.target = cuda_profile(*find_gpu("rtx4090")).target;
  return r;
}
void BM_StageGraph(benchmark::State& state, const std::string& model, int64_t batch) {
  const ModelRequest r = stage_request(model, batch);
  for (auto _ : state) benchmark::DoNotOptimize(build_model(r)->nodes.size());
}
// The RTX 4090's options, memory only.
EstimateOptions stage_options() {
  EstimateOptions o;
  o.device = cuda_profile(*find_gpu("rtx4090"));
  o.step_time = false;
  return o;
}
void BM_StageLower(benchmark::State& state, const std::string& model, int64_t batch) {
  const Graph g = *build_model(stage_request(model, batch));
  const EstimateOptions o = stage_options();
  for (auto _ : state) benchmark::DoNotOptimize(lower_step(g, o)->list.events.size());
}
void BM_StageReplay(benchmark::State& state, const std::string& model, int64_t batch) {
  const Graph g = *build_model(stage_request(model, batch));
  const EstimateOptions o = stage_options();
  const LoweredStep step = *lower_step(g, o);
  for (auto _ : state) benchmark::DoNotOptimize(estimate_lowered(g, step, o)->peak_reserved_bytes);
}
// Each stage of resnet50 at batch 256 and of ACT at batch 8.
const bool kStagesRegistered = [] {
  for (const auto& [name, model, batch] :
       {std::tuple<const char*, const char*, int64_t>{"resnet50_batch256", "resnet50", 256},
        {"act_batch8", "act", 8}}) {
    for (const auto& [stage, fn] :
         {std::pair<const char*, void (*)(benchmark::State&, const std::string&, int64_t)>{
              "BM_StageGraph", BM_StageGraph},
          {"BM_StageLower", BM_StageLower},
          {"BM_StageReplay", BM_StageReplay}}) {
      benchmark::RegisterBenchmark((std::string(stage) + "/" + name).c_str(), fn,
                                   std::string(model), batch)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return true;
}();

// What the step time adds to an estimate: the cost model and the timing, on a built graph.
void BM_StepTimeOnly(benchmark::State& state, const std::string& model, int64_t batch,
                     const std::vector<std::pair<std::string, std::string>>& sets) {
  ModelRequest r;
  r.name = model;
  r.batch = batch;
  r.sets = sets;
  const Graph g = *build_model(r);
  const GpuTiming gpu = catalog_timing(*find_gpu("a100-80gb"));
  for (auto _ : state) {
    const StepCost cost = *step_cost(g, TrainingConfig{}, {});
    benchmark::DoNotOptimize(time_step(cost, gpu).step_s);
  }
}
BENCHMARK_CAPTURE(BM_StepTimeOnly, resnet50_batch256, std::string("resnet50"), 256,
                  std::vector<std::pair<std::string, std::string>>{})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StepTimeOnly, act_3cams_batch8, std::string("act"), 8,
                  std::vector<std::pair<std::string, std::string>>{
                      {"cameras", "640x360,640x480,640x480"}})
    ->Unit(benchmark::kMillisecond);

// LeRobot's policies: ACT with the README example's three cameras, Diffusion (v0.6).
void BM_Policy(benchmark::State& state, const std::string& model, int64_t batch,
               const std::vector<std::pair<std::string, std::string>>& sets) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(run(model, batch, sets).peak_reserved_bytes);
  }
}
BENCHMARK_CAPTURE(BM_Policy, act_3cams_batch8, std::string("act"), 8,
                  std::vector<std::pair<std::string, std::string>>{
                      {"cameras", "640x360,640x480,640x480"}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Policy, diffusion_batch64, std::string("diffusion"), 64,
                  std::vector<std::pair<std::string, std::string>>{})
    ->Unit(benchmark::kMillisecond);

// A batch-size search: 20 estimates at the batch sizes a bisection over 1..1024 visits.
void BM_BatchSearch20(benchmark::State& state, const std::string& model) {
  for (auto _ : state) {
    int64_t lo = 1, hi = 1024;
    for (int i = 0; i < 20; ++i) {
      const int64_t mid = (lo + hi + 1) / 2;
      const Estimate e = run(model, mid);
      benchmark::DoNotOptimize(e.device_used_bytes);
      if (e.fits)
        lo = mid;
      else
        hi = mid - 1;
      if (lo >= hi) {
        lo = 1;
        hi = 1024;
      }
    }
  }
}
BENCHMARK_CAPTURE(BM_BatchSearch20, resnet50, std::string("resnet50"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BatchSearch20, vit_b_16, std::string("vit_b_16"))
    ->Unit(benchmark::kMillisecond);

// `trainfit fit --gpu all`, end to end through the command line: the largest batch on every
// catalog GPU for seed 000's ACT (three cameras, chunk_size 30, bf16 autocast).
void BM_FitAllGpus(benchmark::State& state) {
  const std::vector<std::string> args = {
      "trainfit", "fit",           "--model",
      "act",      "--set",         "cameras=640x360,640x480,640x480",
      "--set",    "chunk_size=30", "--precision",
      "amp-bf16", "--gpu",         "all"};
  for (auto _ : state) {
    std::ostringstream out, err;
    benchmark::DoNotOptimize(run_cli(args, out, err));
  }
}
BENCHMARK(BM_FitAllGpus)->Unit(benchmark::kMillisecond);

// `trainfit loader` end to end: reading the recorded loader profile, the plan for seed 000's
// ACT on an RTX 4090 (its step time predicted), and the text report.
void BM_LoaderPlan(benchmark::State& state) {
  const std::vector<std::string> args = {
      "trainfit",    "loader",   "--profile", TRAINFIT_LOADER_PROFILE,
      "--model",     "act",      "--set",     "cameras=640x360,640x480,640x480",
      "--precision", "amp-bf16", "--batch",   "8",
      "--gpu",       "rtx4090"};
  for (auto _ : state) {
    std::ostringstream out, err;
    benchmark::DoNotOptimize(run_cli(args, out, err));
  }
}
BENCHMARK(BM_LoaderPlan)->Unit(benchmark::kMillisecond);

// With a given step time: reading the profile, the plan and the text report.
void BM_LoaderPlanOnly(benchmark::State& state) {
  const std::vector<std::string> args = {
      "trainfit",    "loader", "--profile", TRAINFIT_LOADER_PROFILE,
      "--step-time", "80ms",   "--batch",   "32"};
  for (auto _ : state) {
    std::ostringstream out, err;
    benchmark::DoNotOptimize(run_cli(args, out, err));
  }
}
BENCHMARK(BM_LoaderPlanOnly)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace trainfit

BENCHMARK_MAIN();
