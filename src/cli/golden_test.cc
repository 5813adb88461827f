// The planning commands' reports, text and JSON, against golden files: what `estimate`, `fit`,
// `compare`, `summary` and `schedule` print must not change unless a figure changes for a measured
// reason.
//
// tests/data/golden/cli/<name> holds stdout, or for a refused command "exit N" and stderr.
// Paths under the test data folder print as tests/data/..., wherever the checkout is.
// TRAINFIT_UPDATE_GOLDEN=1 rewrites the files; review the diff before committing it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/golden_test_util.h"
#include "cli/cli_test_util.h"

namespace trainfit {
namespace {

struct GoldenCase {
  const char* name;  // the golden file under golden/cli/
  std::vector<std::string> args;
};

std::ostream& operator<<(std::ostream& os, const GoldenCase& c) {
  return os << c.name;
}

const std::string kData = TRAINFIT_TEST_DATA_DIR;
const std::string kTiny = kData + "/traces/tiny_cnn.trace.json";
const std::string kTinyAmp = kData + "/traces/tiny_block_amp.trace.json";
const std::vector<std::string> kAct3 = {"--model", "act", "--set",
                                        "cameras=640x360,640x480,640x480"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Replaces every occurrence of `from` with `to`.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

class CliGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CliGolden, PrintsTheGoldenReport) {
  const GoldenCase& c = GetParam();
  const CliRun r = run(c.args);
  std::string printed = r.code == 0 ? r.out : fmt::format("exit {}\n{}", r.code, r.err);
  if (r.code != 0) {
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  expect_golden(std::string("cli/") + c.name, replace_all(printed, kData, "tests/data"));
}

INSTANTIATE_TEST_SUITE_P(
    Estimate, CliGolden,
    ::testing::Values(
        GoldenCase{"estimate_resnet50_b64_rtx4090.txt",
                   {"estimate", "--model", "resnet50", "--batch", "64", "--gpu", "rtx4090"}},
        GoldenCase{
            "estimate_resnet50_b64_rtx4090.json",
            {"estimate", "--model", "resnet50", "--batch", "64", "--gpu", "rtx4090", "--json"}},
        GoldenCase{"estimate_resnet18_cpu_sgd.json",
                   {"estimate", "--model", "resnet18", "--batch", "8", "--device-profile", "cpu",
                    "--optimizer", "sgd", "--json"}},
        GoldenCase{
            "estimate_vit_b_16_amp_bf16_fused_a100.json",
            {"estimate", "--model", "vit_b_16", "--batch", "32", "--precision", "amp-bf16",
             "--optimizer", "adamw", "--optimizer-impl", "fused", "--gpu", "a100-80gb", "--json"}},
        GoldenCase{"estimate_resnet50_checkpoint_explain.json",
                   {"estimate", "--model", "resnet50", "--batch", "8", "--input", "3x160x160",
                    "--checkpoint", "layer3", "--checkpoint", "layer4", "--expandable-segments",
                    "--explain", "--json"}},
        GoldenCase{"estimate_gpt2_amp_fp16.txt",
                   {"estimate", "--model", "gpt2", "--seq-len", "256", "--batch", "4", "--gpu",
                    "rtx4090", "--precision", "amp-fp16"}},
        GoldenCase{
            "estimate_resnet50_ddp_baseline.txt",
            {"estimate", "--model", "resnet50", "--batch", "4", "--gpus", "2", "--gpu", "rtx4090",
             "--baseline-batch", "4", "--baseline-lr", "0.002", "--dataset-size", "6765"}},
        GoldenCase{"estimate_resnet18_zero1_sgd_baseline.json", {"estimate",  "--model",
                                                                 "resnet18",  "--batch",
                                                                 "32",        "--gpus",
                                                                 "8",         "--strategy",
                                                                 "zero1",     "--optimizer",
                                                                 "momentum",  "--grad-accum",
                                                                 "4",         "--baseline-batch",
                                                                 "256",       "--baseline-lr",
                                                                 "0.1",       "--dataset-size",
                                                                 "1281167",   "--gpu",
                                                                 "a100-80gb", "--json"}},
        GoldenCase{"launch_resnet50_rtx4090_4gpus.txt",
                   {"launch", "--model", "resnet50", "--optimizer", "momentum", "--gpu", "rtx4090",
                    "--gpus", "4", "--baseline-batch", "512", "--baseline-lr", "0.1",
                    "--dataset-size", "1281167", "--cores", "32"}},
        GoldenCase{"estimate_gpt2_eager_accum.json",
                   {"estimate", "--model", "gpt2", "--seq-len", "128", "--batch", "2", "--set",
                    "attention=eager", "--grad-accum", "4", "--json"}},
        GoldenCase{"estimate_act_3cams_amp_bf16.txt",
                   with({"estimate", "--gpu", "rtx4090", "--batch", "8", "--precision", "amp-bf16"},
                        kAct3)},
        GoldenCase{"estimate_act_adamw8bit.json",
                   {"estimate", "--model", "act", "--batch", "48", "--set", "chunk_size=100",
                    "--gpu", "rtx4090", "--optimizer", "adamw8bit", "--json"}},
        GoldenCase{"estimate_diffusion_classic.json",
                   {"estimate", "--model", "diffusion", "--batch", "64", "--gpu", "rtx4090",
                    "--set", "preset=classic", "--json"}},
        GoldenCase{"estimate_resnet50_oom_rtx3060.txt",
                   {"estimate", "--model", "resnet50", "--batch", "512", "--gpu", "rtx3060"}},
        GoldenCase{
            "estimate_resnet50_oom_rtx3060.json",
            {"estimate", "--model", "resnet50", "--batch", "512", "--gpu", "rtx3060", "--json"}},
        GoldenCase{"estimate_resnet50_gpu_memory.json",
                   {"estimate", "--model", "resnet50", "--batch", "100", "--gpu-memory", "16GiB",
                    "--cuda-context", "300MiB", "--max-split-size", "128MiB", "--json"}},
        GoldenCase{
            "estimate_resnet50_freeze_h100.txt",
            {"estimate", "--model", "resnet50", "--batch", "64", "--freeze", "layer1", "--freeze",
             "conv1", "--weight-decay", "0.05", "--gpu", "h100-80gb", "--margin", "10%"}},
        GoldenCase{
            "estimate_trace_cuda.txt",
            {"estimate", "--trace", kTiny, "--batch", "64", "--gpu", "rtx4090", "--explain"}},
        GoldenCase{"estimate_trace_fused.json",
                   {"estimate", "--trace", kTiny, "--batch", "64", "--gpu", "h100-80gb",
                    "--optimizer-impl", "fused", "--json"}},
        GoldenCase{
            "estimate_trace_cpu.json",
            {"estimate", "--trace", kTiny, "--batch", "16", "--device-profile", "cpu", "--json"}},
        GoldenCase{"estimate_trace_amp_fp16.txt",
                   {"estimate", "--trace", kTinyAmp, "--batch", "64", "--gpu", "h100-80gb",
                    "--precision", "amp-fp16", "--grad-scaler-skips", "1"}},
        GoldenCase{"estimate_trace_amp_bf16.json",
                   {"estimate", "--trace", kTinyAmp, "--batch", "64", "--gpu", "h100-80gb",
                    "--precision", "amp-bf16", "--json"}}));

INSTANTIATE_TEST_SUITE_P(
    SummaryAndCompare, CliGolden,
    ::testing::Values(
        GoldenCase{"summary_gpt2_amp_bf16.txt",
                   {"summary", "--model", "gpt2", "--seq-len", "512", "--precision", "amp-bf16"}},
        GoldenCase{"summary_act_3cams.json", with({"summary", "--batch", "8", "--json"}, kAct3)},
        GoldenCase{"summary_trace_tiny_cnn.txt",
                   {"summary", "--trace", kTiny, "--batch", "16", "--device-profile", "cpu"}},
        GoldenCase{"summary_resnet50_cpu_freeze.json",
                   {"summary", "--model", "resnet50", "--batch", "4", "--device-profile", "cpu",
                    "--freeze", "layer1", "--json", "--depth", "2"}},
        GoldenCase{"compare_act_diffusion.txt",
                   {"compare", "--gpu", "rtx4090", "--model", "act", "--batch", "48", "--model",
                    "diffusion", "--batch", "64"}},
        GoldenCase{"compare_act_diffusion.json",
                   {"compare", "--gpu", "rtx4090", "--model", "act", "--batch", "48", "--model",
                    "diffusion", "--batch", "64", "--json"}},
        GoldenCase{"compare_trace_resnet18.txt",
                   {"compare", "--gpu", "rtx4090", "--trace", kTiny, "--batch", "32", "--model",
                    "resnet18", "--batch", "32", "--input", "3x32x32"}},
        GoldenCase{"compare_trace_resnet18_cpu.json",
                   {"compare", "--device-profile", "cpu", "--model", "resnet18", "--batch", "2",
                    "--trace", kTiny, "--batch", "2", "--json"}}));

INSTANTIATE_TEST_SUITE_P(
    Fit, CliGolden,
    ::testing::Values(
        GoldenCase{"fit_resnet50_rtx4090.txt", {"fit", "--model", "resnet50", "--gpu", "rtx4090"}},
        GoldenCase{"fit_resnet50_rtx4090.json",
                   {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--json"}},
        GoldenCase{"fit_act_all.json", with({"fit", "--set", "chunk_size=30", "--precision",
                                             "amp-bf16", "--gpu", "all", "--json"},
                                            kAct3)},
        GoldenCase{"fit_gpt2_what_if.txt",
                   {"fit", "--model", "gpt2", "--seq-len", "512", "--gpu", "rtx4090", "--batch",
                    "4", "--what-if"}},
        GoldenCase{
            "fit_resnet50_target_384.json",
            {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--target-batch", "384", "--json"}},
        GoldenCase{"fit_resnet50_target_4096.txt",
                   {"fit", "--model", "resnet50", "--gpu", "rtx3060", "--target-batch", "4096"}},
        GoldenCase{"fit_act_target_300_model_changes.json",
                   {"fit", "--model", "act", "--gpu", "rtx3060", "--target-batch", "300",
                    "--allow-model-changes", "--json"}},
        GoldenCase{"fit_trace_what_if.txt",
                   {"fit", "--trace", kTiny, "--gpu", "rtx4090", "--what-if"}},
        GoldenCase{"fit_trace_all.json", {"fit", "--trace", kTiny, "--gpu", "all", "--json"}}));

const std::string kCurves = kData + "/schedules";
const std::string kWarmupThenSteps =
    "SequentialLR(schedulers=[LinearLR(start_factor=0.1, total_iters=3), "
    "MultiStepLR(milestones=[6, 9])], milestones=[3])";

INSTANTIATE_TEST_SUITE_P(
    Schedule, CliGolden,
    ::testing::Values(
        GoldenCase{"schedule_warm_restarts.txt",
                   {"schedule", "--scheduler", "CosineAnnealingWarmRestarts", "--set", "T_0=10",
                    "--set", "T_mult=2", "--set", "eta_min=1e-6", "--lr", "0.1", "--epochs", "70"}},
        GoldenCase{"schedule_sequential_warmup.json",
                   {"schedule", "--scheduler", kWarmupThenSteps, "--lr", "0.1,0.01", "--epochs",
                    "12", "--json"}},
        GoldenCase{"schedule_plateau_early_stopping.txt",
                   {"schedule", "--scheduler", "ReduceLROnPlateau(factor=0.5, patience=3)", "--lr",
                    "0.01", "--metrics", kCurves + "/lightning_metrics.csv", "--column", "val_loss",
                    "--early-stopping", "patience=10", "--early-stopping", "min_delta=0.001"}},
        GoldenCase{"schedule_plateau_early_stopping.json",
                   {"schedule", "--scheduler", "ReduceLROnPlateau(mode='max', patience=2)", "--lr",
                    "0.1", "--metrics", kCurves + "/tensorboard_val_acc.csv", "--early-stopping",
                    "mode=max", "--json"}},
        GoldenCase{"fit_trace_curve.txt", {"fit", "--trace", kTiny, "--gpu", "rtx4090", "--curve"}},
        GoldenCase{"error_schedule_t0.txt",
                   {"schedule", "--scheduler", "CosineAnnealingWarmRestarts(T_0=0)", "--lr", "0.1",
                    "--epochs", "10"}},
        GoldenCase{"error_schedule_milestones.txt",
                   {"schedule", "--scheduler", "MultiStepLR", "--set", "milestones=80,30", "--lr",
                    "0.1", "--epochs", "100"}},
        GoldenCase{"error_schedule_nan.txt",
                   {"schedule", "--scheduler", "StepLR(step_size=2)", "--lr", "0.1", "--metrics",
                    kCurves + "/diverged.csv", "--early-stopping", "patience=3"}}));

INSTANTIATE_TEST_SUITE_P(
    Refused, CliGolden,
    ::testing::Values(GoldenCase{"error_unknown_model.txt", {"estimate", "--model", "resnt50"}},
                      GoldenCase{"error_margin_without_gpu.txt",
                                 {"estimate", "--model", "resnet50", "--margin", "5%"}},
                      GoldenCase{"error_8bit_impl.txt",
                                 {"estimate", "--model", "resnet50", "--optimizer", "adam8bit",
                                  "--optimizer-impl", "fused"}},
                      GoldenCase{"error_trace_optimizer.txt",
                                 {"estimate", "--trace", kTiny, "--optimizer", "sgd"}},
                      GoldenCase{"error_trace_fp32_precision.txt",
                                 {"estimate", "--trace", kTiny, "--precision", "amp-bf16"}},
                      GoldenCase{"error_trace_amp_without_precision.txt",
                                 {"estimate", "--trace", kTinyAmp, "--batch", "8"}},
                      GoldenCase{"error_trace_amp_cpu_profile.txt",
                                 {"estimate", "--trace", kTinyAmp, "--device-profile", "cpu",
                                  "--precision", "amp-bf16"}},
                      GoldenCase{"error_overflow.txt",
                                 {"estimate", "--model", "resnet50", "--batch", "9999999999999"}},
                      GoldenCase{"error_compare_model.txt",
                                 {"compare", "--model", "resnet50", "--model", "resnt50"}},
                      GoldenCase{"error_fit_target.txt",
                                 {"fit", "--model", "resnet50", "--gpu", "rtx4090",
                                  "--target-batch", "-3"}}));

}  // namespace
}  // namespace trainfit
