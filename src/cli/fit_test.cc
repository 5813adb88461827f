// trainfit fit against trainfit estimate: the batch it finds fits and one more does not, every
// what-if row is the estimate of its own command line, and --target-batch's answer fits.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli.h"
#include "cli/cli_test_util.h"
#include "cli/request_cli.h"
#include "pipeline/request_options.h"
#include "plan/batch_search.h"

namespace trainfit {
namespace {

// Seed 000's ACT: three cameras, chunk_size 30, bf16 autocast.
const std::vector<std::string> kAct = {
    "--model", "act",           "--set",       "cameras=640x360,640x480,640x480",
    "--set",   "chunk_size=30", "--precision", "amp-bf16"};
const std::vector<std::string> kResnet = {"--model", "resnet50"};

struct BoundaryCase {
  std::vector<std::string> model;
  std::string gpu;
  std::string margin;  // empty: fit's default, 5%
};

class FitBoundary : public ::testing::TestWithParam<BoundaryCase> {};

TEST_P(FitBoundary, MaxBatchFitsAndOneMoreDoesNot) {
  const BoundaryCase& c = GetParam();
  std::vector<std::string> fit = concat(concat({"fit"}, c.model), {"--gpu", c.gpu});
  const std::string margin = c.margin.empty() ? "5%" : c.margin;
  if (!c.margin.empty()) fit = concat(fit, {"--margin", c.margin});
  const nlohmann::json f = run_json(fit);
  const int64_t max_batch = f["max_batch"].get<int64_t>();
  ASSERT_GT(max_batch, 0);
  EXPECT_FALSE(f["at_search_limit"].get<bool>());
  const auto estimate_at = [&](int64_t batch) {
    return run_json(concat(concat({"estimate"}, c.model),
                           {"--gpu", c.gpu, "--margin", margin, "--batch", std::to_string(batch)}));
  };
  // fit decides by the upper figures (Note [Workspace bounds]), estimate's fits_upper.
  const nlohmann::json at = estimate_at(max_batch);
  EXPECT_TRUE(at["fits_upper"].get<bool>()) << "batch " << max_batch;
  EXPECT_EQ(at["device_used_bytes"], f["device_used_bytes"]);
  EXPECT_EQ(at["device_used_upper_bytes"], f["device_used_upper_bytes"]);
  EXPECT_EQ(at["peak_allocated_bytes"], f["peak_allocated_bytes"]);
  const nlohmann::json above = estimate_at(max_batch + 1);
  EXPECT_FALSE(above["fits_upper"].get<bool>()) << "batch " << max_batch + 1;
  // The central figure alone, searched the same way, allows as much or (mostly) more.
  const int64_t central = f["central_max_batch"].get<int64_t>();
  ASSERT_GT(central, 0);
  EXPECT_TRUE(estimate_at(central)["fits"].get<bool>()) << "batch " << central;
  EXPECT_FALSE(estimate_at(central + 1)["fits"].get<bool>()) << "batch " << central + 1;
}

INSTANTIATE_TEST_SUITE_P(
    ResnetAndAct, FitBoundary,
    ::testing::Values(BoundaryCase{kResnet, "rtx4090", ""}, BoundaryCase{kResnet, "a100-80gb", ""},
                      BoundaryCase{kResnet, "rtx4090", "0"}, BoundaryCase{kAct, "rtx4090", ""},
                      BoundaryCase{kAct, "a100-80gb", ""}, BoundaryCase{kAct, "h100-80gb", "10%"}));

TEST(Fit, AllGpusAgreesWithOneGpuAtATime) {
  const nlohmann::json all = run_json(concat(concat({"fit"}, kAct), {"--gpu", "all"}));
  ASSERT_TRUE(all["gpus"].is_array());
  EXPECT_EQ(all["gpus"].size(), gpu_catalog().size());
  for (const char* gpu : {"rtx3060", "rtx4090", "h200"}) {
    const nlohmann::json one = run_json(concat(concat({"fit"}, kAct), {"--gpu", gpu}));
    EXPECT_EQ(all["max_batch"][gpu], one["max_batch"]) << gpu;
  }
}

// Each row's figures are those of `trainfit estimate` with the row's command line, and that
// command line is the user's plus the knob's change.
void expect_rows_are_estimates(const std::vector<std::string>& model, const std::string& gpu,
                               const std::string& batch, const std::vector<std::string>& expected) {
  const nlohmann::json f =
      run_json(concat(concat({"fit"}, model), {"--gpu", gpu, "--batch", batch, "--what-if"}));
  const nlohmann::json& rows = f["what_if"]["rows"];
  ASSERT_FALSE(rows.empty());
  std::vector<std::string> names;
  for (const nlohmann::json& row : rows) {
    const std::string name = row["name"].get<std::string>();
    SCOPED_TRACE(name);
    names.push_back(name);
    std::vector<std::string> args = row["estimate_args"].get<std::vector<std::string>>();
    const nlohmann::json e = run_json(concat({"estimate"}, args));
    EXPECT_EQ(e["batch"].get<int64_t>(), std::stoll(batch)) << "at the user's batch";
    EXPECT_EQ(row["peak_allocated_bytes"], e["peak_allocated_bytes"]);
    EXPECT_EQ(row["peak_reserved_bytes"], e["peak_reserved_bytes"]);
    EXPECT_EQ(row["device_used_bytes"], e["device_used_bytes"]);
    EXPECT_EQ(row["fits"], e["fits"]);
    // The step time too, and its change is against the request as given.
    EXPECT_EQ(row["step_time_s"], e["step_time_s"]);
    EXPECT_NEAR(row["step_time_change"].get<double>(),
                e["step_time_s"].get<double>() / f["what_if"]["step_time_s"].get<double>() - 1,
                1e-12);
    // The change is the knob's arguments on top of the user's.
    const std::vector<std::string> knob = row["args"].get<std::vector<std::string>>();
    RequestCli user(RequestCommand::kCompare);
    const Status parsed_args = user.parse_layered(
        concat(concat(model, {"--gpu", gpu, "--batch", batch, "--margin", "5%"}), knob));
    ASSERT_TRUE(parsed_args.ok()) << parsed_args.to_string();
    Result<TrainingRequest> parsed = user.to_request();
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    EXPECT_EQ(request_args(*parsed), args);
  }
  for (const std::string& want : expected) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
}

TEST(FitWhatIf, ActRowsAreDirectEstimates) {
  expect_rows_are_estimates(
      {"--model", "act"}, "rtx4090", "8",
      {"AMP bf16", "AMP fp16", "fused optimizer", "8-bit AdamW state", "SGD with momentum",
       "expandable segments", "checkpoint backbone stages", "checkpoint encoder layers",
       "checkpoint decoder layers", "checkpoint VAE encoder layers", "freeze backbone",
       "chunk_size 100 -> 50", "dim_feedforward 3200 -> 2048", "n_encoder_layers 4 -> 2",
       "use_vae true -> false (no VAE)", "cameras 640x480 -> 320x240"});
}

TEST(FitWhatIf, ResnetRowsAreDirectEstimates) {
  expect_rows_are_estimates({"--model", "resnet50", "--optimizer", "adam"}, "a100-80gb", "64",
                            {"checkpoint layer1 blocks", "checkpoint layer4 blocks",
                             "8-bit Adam state", "image 224x224 -> 112x112", "freeze backbone"});
}

TEST(FitWhatIf, DiffusionGpt2AndVitRowsAreDirectEstimates) {
  expect_rows_are_estimates({"--model", "diffusion", "--set", "preset=classic"}, "rtx4090", "64",
                            {"checkpoint UNet residual blocks", "checkpoint RGB encoder stages",
                             "horizon 16 -> 8", "down_dims 512,1024,2048 -> 256,512,1024"});
  expect_rows_are_estimates(
      {"--model", "gpt2", "--seq-len", "512"}, "rtx4090", "4",
      {"checkpoint transformer blocks", "seq-len 512 -> 256", "n_layer 12 -> 6"});
  expect_rows_are_estimates({"--model", "vit_b_16", "--precision", "amp-bf16"}, "t4", "32",
                            {"checkpoint encoder layers", "expandable segments"});
}

// A decoder's what-if offers Liger's fused linear cross-entropy, except under autocast, where it
// is not modelled.
TEST(FitWhatIf, DecoderRowsOfferLigerLossWithoutAutocast) {
  const std::string config =
      std::string(TRAINFIT_TEST_DATA_DIR) + "/../../examples/llama-3.2-1b.json";
  expect_rows_are_estimates(
      {"--hf-config", config, "--seq-len", "256", "--precision", "bf16", "--lora", "r=8"},
      "rtx4090", "2",
      {"Liger fused linear cross-entropy", "no key/value cache", "4-bit NF4 base (QLoRA)"});
  const nlohmann::json amp =
      run_json({"fit", "--hf-config", config, "--seq-len", "256", "--precision", "amp-bf16",
                "--gpu", "rtx4090", "--batch", "2", "--what-if"});
  ASSERT_FALSE(amp["what_if"]["rows"].empty());
  for (const nlohmann::json& row : amp["what_if"]["rows"]) {
    EXPECT_NE(row["name"], "Liger fused linear cross-entropy");
  }
}

// Over two GPUs the what-if also offers DDP's gradient_as_bucket_view and ZeroRedundancyOptimizer.
TEST(FitWhatIf, DdpRowsAreDirectEstimates) {
  expect_rows_are_estimates({"--model", "resnet18", "--gpus", "2"}, "rtx4090", "32",
                            {"gradient as bucket view", "ZeroRedundancyOptimizer", "AMP bf16"});
}

TEST(FitWhatIf, CheckpointCostIsTheRecomputedShareOfTheStep) {
  const nlohmann::json f =
      run_json({"fit", "--model", "resnet50", "--gpu", "rtx4090", "--batch", "32", "--what-if"});
  double all_stages = 0;
  for (const nlohmann::json& row : f["what_if"]["rows"]) {
    if (row["kind"] != "recompute") continue;
    const double share = row["recompute_share"].get<double>();
    EXPECT_GT(share, 0.0);
    EXPECT_LT(share, 1.0 / 3.0);  // at most the forward pass, a third of forward + backward
    all_stages += share;
  }
  // The four stages re-run nearly the whole forward pass: close to a third of the step.
  EXPECT_GT(all_stages, 0.25);
  EXPECT_LT(all_stages, 1.0 / 3.0);
}

TEST(FitWhatIf, RankTimePutsTheFastestFirst) {
  const std::vector<std::string> args = {"fit",     "--model", "resnet50", "--gpu",
                                         "rtx4090", "--batch", "32",       "--what-if"};
  const nlohmann::json by_memory = run_json(args);
  const nlohmann::json by_time = run_json(concat(args, {"--rank", "time"}));
  EXPECT_EQ(by_time["rank"], "time");
  const nlohmann::json& rows = by_time["what_if"]["rows"];
  ASSERT_EQ(rows.size(), by_memory["what_if"]["rows"].size());
  double previous = -1;
  for (const nlohmann::json& row : rows) {
    SCOPED_TRACE(row["name"].get<std::string>());
    const double change = row["step_time_change"].get<double>();
    EXPECT_GE(change, previous);
    previous = change;
    // What the model must get right in sign: AMP speeds the step up, recompute slows it.
    if (row["kind"] == "recompute") {
      EXPECT_GT(change, 0);
    }
    if (row["name"] == "AMP bf16") {
      EXPECT_LT(change, -0.1);
    }
  }
}

TEST(Fit, AllGpusRankTimeOrdersTheCardsBySamplesPerSecond) {
  const nlohmann::json all =
      run_json({"fit", "--model", "resnet50", "--gpu", "all", "--rank", "time"});
  ASSERT_EQ(all["gpus"].size(), gpu_catalog().size());
  double previous = std::numeric_limits<double>::infinity();
  for (const nlohmann::json& g : all["gpus"]) {
    const double rate = g["samples_per_s"].get<double>();
    EXPECT_LE(rate, previous) << g["gpu"];
    previous = rate;
  }
  EXPECT_EQ(all["gpus"][0]["gpu"].get<std::string>().substr(0, 1), "h") << "an H100 or H200";
}

TEST(FitTarget, CheapestCombinationFits) {
  const nlohmann::json f =
      run_json({"fit", "--model", "resnet50", "--gpu", "rtx4090", "--target-batch", "384"});
  const nlohmann::json& t = f["target"];
  ASSERT_TRUE(t["fits"].get<bool>());
  EXPECT_FALSE(t["knobs"].empty());
  for (const nlohmann::json& k : t["knobs"]) EXPECT_NE(k["kind"], "model");
  const nlohmann::json e =
      run_json(concat({"estimate"}, t["estimate_args"].get<std::vector<std::string>>()));
  EXPECT_TRUE(e["fits"].get<bool>());
  EXPECT_EQ(e["batch"], 384);
}

// Batch 10^9 of resnet50 on a 16 GB card would take millions of micro-batches: the plan says how
// many and stops there, without estimating them.
TEST(FitTarget, AccumulationPastThePlanLimitIsSaidNotEstimated) {
  const std::vector<std::string> args = {"fit", "--model",        "resnet50",  "--gpu",
                                         "t4",  "--target-batch", "1000000000"};
  const nlohmann::json f = run_json(args);
  const nlohmann::json& a = f["target"]["accumulation"];
  EXPECT_FALSE(a["estimated"].get<bool>());
  const int64_t micro = a["micro_batch"].get<int64_t>();
  const int64_t steps = a["steps"].get<int64_t>();
  EXPECT_GT(steps, kMaxPlannedAccumulation);
  EXPECT_GE(micro * steps, 1000000000);
  const CliRun text = run(args);
  EXPECT_EQ(text.code, 0);
  const std::string says =
      fmt::format("would take {} micro-batches of {}, more than the 256", steps, micro);
  EXPECT_NE(text.out.find(says), std::string::npos) << text.out;
  // The HTML report says the same, and draws no bar for a plan it did not estimate.
  const std::string html = testing::TempDir() + "unplanned_accumulation.html";
  ASSERT_EQ(run(concat(args, {"--html", html})).code, 0);
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find(says), std::string::npos);
  EXPECT_EQ(page.find(fmt::format("micro-batch {} x {} steps", micro, steps)), std::string::npos);
}

TEST(FitTarget, AccumulationWhenNoKnobFits) {
  // Without model changes nothing makes batch 4096 of resnet50 fit a 12 GB card.
  const nlohmann::json f =
      run_json({"fit", "--model", "resnet50", "--gpu", "rtx3060", "--target-batch", "4096"});
  const nlohmann::json& t = f["target"];
  ASSERT_FALSE(t["fits"].get<bool>());
  EXPECT_TRUE(t["accumulation"]["estimated"].get<bool>());
  const int64_t micro = t["accumulation"]["micro_batch"].get<int64_t>();
  const int64_t steps = t["accumulation"]["steps"].get<int64_t>();
  EXPECT_GT(micro, 0);
  EXPECT_GE(micro * steps, 4096);
  EXPECT_EQ(t["accumulation"]["effective_batch"].get<int64_t>(), micro * steps);
  const nlohmann::json e =
      run_json(concat({"estimate"}, t["estimate_args"].get<std::vector<std::string>>()));
  EXPECT_TRUE(e["fits"].get<bool>());
  EXPECT_EQ(e["grad_accum"].get<int64_t>(), steps);
  // The micro-batch is at most the largest that fits with accumulation on, and no split of
  // 4096 into fewer steps fits: not an exact one, and a plain one only where no exact split is
  // within twice its steps (the planner keeps the effective batch exact when it can).
  const nlohmann::json acc = run_json(
      {"fit", "--model", "resnet50", "--gpu", "rtx3060", "--grad-accum", std::to_string(steps)});
  const int64_t largest = acc["max_batch"].get<int64_t>();
  EXPECT_LE(micro, largest);
  const int64_t fewest = (4096 + largest - 1) / largest;
  for (int64_t k = fewest; k < steps; ++k) {
    EXPECT_TRUE(4096 % k != 0 || 4096 / k > largest) << k << " steps would do";
  }
  EXPECT_LE(steps, 2 * fewest);
}

// ACT at batch 300 on a 12 GB card: no knob that keeps the model gets there (checkpointing every
// encoder and decoder layer with the backbone frozen still needs 14.0 GiB), so the plan is
// accumulation; allowed to change the model, a combination with a model change fits.
TEST(FitTarget, ModelChangesOnlyWhenAllowed) {
  const std::vector<std::string> base = {"fit",     "--model",        "act", "--gpu",
                                         "rtx3060", "--target-batch", "300"};
  const nlohmann::json strict = run_json(base);
  EXPECT_FALSE(strict["target"]["fits"].get<bool>());
  EXPECT_TRUE(strict["target"]["knobs"].empty());
  const nlohmann::json loose = run_json(concat(base, {"--allow-model-changes"}));
  ASSERT_TRUE(loose["target"]["fits"].get<bool>());
  const nlohmann::json& knobs = loose["target"]["knobs"];
  EXPECT_TRUE(std::any_of(knobs.begin(), knobs.end(),
                          [](const nlohmann::json& k) { return k["kind"] == "model"; }));
  const nlohmann::json e = run_json(
      concat({"estimate"}, loose["target"]["estimate_args"].get<std::vector<std::string>>()));
  EXPECT_TRUE(e["fits"].get<bool>());
  EXPECT_EQ(e["batch"], 300);
  // At batch 180 knobs that keep the model suffice, so a plan allowed model changes makes none.
  const nlohmann::json kept =
      run_json({"fit", "--model", "act", "--gpu", "rtx3060", "--target-batch", "180"});
  ASSERT_TRUE(kept["target"]["fits"].get<bool>());
  const nlohmann::json fewer = run_json({"fit", "--model", "act", "--gpu", "rtx3060",
                                         "--target-batch", "180", "--allow-model-changes"});
  ASSERT_TRUE(fewer["target"]["fits"].get<bool>());
  for (const nlohmann::json& k : fewer["target"]["knobs"]) EXPECT_NE(k["kind"], "model") << k;
}

TEST(Fit, BadInputIsOneLine) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"fit", "--model", "resnet50"},
           {"fit", "--model", "resnet50", "--gpu", "rtx9999"},
           {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--margin", "abc"},
           {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--margin", "80%"},
           {"fit", "--model", "resnet50", "--gpu", "all", "--what-if"},
           {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--target-batch", "-3"},
           {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--device-profile", "cpu"},
           {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--what-if", "--rank", "fast"},
           {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--rank", "time"},
           {"estimate", "--model", "resnet50", "--margin", "5%"},
       }) {
    const CliRun r = run(args);
    EXPECT_EQ(r.code, kExitBadInput) << args.back();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("hint"), std::string::npos) << r.err;
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Note [Workspace bounds]: on a card no recording covers, resnet50's workspaces are unmeasured;
// estimate gives the bound in text, JSON and HTML, and fit decides by it and says so.
TEST(WorkspaceBound, EveryReportCarriesTheBound) {
  const std::vector<std::string> args = {"--model", "resnet50", "--gpu", "rtx4090"};
  const std::vector<std::string> at64 = concat(concat({"estimate"}, args), {"--batch", "64"});
  const nlohmann::json e = run_json(at64);
  const int64_t upper = e["device_used_upper_bytes"].get<int64_t>();
  EXPECT_GT(upper, e["device_used_bytes"].get<int64_t>());
  EXPECT_GT(e["peak_reserved_upper_bytes"].get<int64_t>(), e["peak_reserved_bytes"].get<int64_t>());
  EXPECT_EQ(e["workspace_sources"]["rule"]["calls"].get<int64_t>(), 158);
  EXPECT_EQ(e["workspace_sources"]["measured"]["calls"].get<int64_t>(), 0);
  const CliRun text = run(at64);
  EXPECT_NE(text.out.find("158 of 158 cuDNN workspaces not measured on this GPU"),
            std::string::npos)
      << text.out;
  const std::string html = testing::TempDir() + "workspace_bound.html";
  ASSERT_EQ(run(concat(at64, {"--html", html})).code, 0);
  EXPECT_NE(read_file(html).find("158 of 158 cuDNN workspaces not measured on this GPU"),
            std::string::npos);
  EXPECT_NE(read_file(html).find("cuDNN workspaces alive at the allocated peak: measured 0 B"),
            std::string::npos);
  // At batch 33 the H100's recordings (batch 8 and 32) are scaled; the peak holds one of them,
  // which the breakdown names.
  const std::vector<std::string> at33 = {"estimate",  "--model", "resnet50", "--gpu",
                                         "h100-80gb", "--batch", "33"};
  const nlohmann::json scaled = run_json(at33);
  const int64_t scaled_at_peak =
      scaled["workspace_sources"]["scaled"]["bytes_at_peak"].get<int64_t>();
  EXPECT_GT(scaled_at_peak, 0);
  EXPECT_NE(run(at33).out.find("cuDNN, not measured on this GPU"), std::string::npos);

  const std::vector<std::string> fit = concat({"fit"}, args);
  const nlohmann::json f = run_json(fit);
  const int64_t max_batch = f["max_batch"].get<int64_t>();
  const int64_t central = f["central_max_batch"].get<int64_t>();
  EXPECT_LT(max_batch, central);  // the bound decides, lower
  const CliRun fit_text = run(fit);
  EXPECT_NE(
      fit_text.out.find(fmt::format("the central figure alone would allow batch {}", central)),
      std::string::npos)
      << fit_text.out;
  const std::string fit_html = testing::TempDir() + "workspace_bound_fit.html";
  ASSERT_EQ(run(concat(fit, {"--html", fit_html})).code, 0);
  EXPECT_NE(read_file(fit_html).find(fmt::format("would allow batch {}", central)),
            std::string::npos);

  // On the H100, at a batch its recordings measured, the bound is the central figure.
  const nlohmann::json h100 =
      run_json({"estimate", "--model", "resnet50", "--gpu", "h100-80gb", "--batch", "32"});
  EXPECT_EQ(h100["device_used_upper_bytes"], h100["device_used_bytes"]);
  EXPECT_EQ(h100["workspace_sources"]["measured"]["calls"].get<int64_t>(), 158);
  EXPECT_EQ(run({"estimate", "--model", "resnet50", "--gpu", "h100-80gb", "--batch", "32"})
                .out.find("up to"),
            std::string::npos);
}

// The searches run side by side (base/parallel.h) and answer what one thread answers, estimate
// counts included: fit --gpu all, a what-if whose rows walk far (resnet50 with its backbone
// frozen walks hundreds of batches), --target-batch, launch and estimate's suggested changes.
TEST(FitThreads, SideBySideAnswersWhatOneThreadAnswers) {
  const std::vector<std::vector<std::string>> commands = {
      {"fit", "--model", "resnet18", "--gpu", "all"},
      {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--what-if"},
      {"fit", "--model", "resnet50", "--gpu", "rtx4090", "--target-batch", "384"},
      {"launch", "--model", "resnet50", "--optimizer", "momentum", "--gpu", "rtx4090", "--gpus",
       "4", "--baseline-batch", "512", "--baseline-lr", "0.1"},
      {"estimate", "--model", "resnet50", "--batch", "64", "--gpu", "h100-80gb"}};
  for (const std::vector<std::string>& command : commands) {
    SCOPED_TRACE(fmt::format("{}", fmt::join(command, " ")));
    const nlohmann::json side_by_side = run_json(command);
    ::setenv("TRAINFIT_THREADS", "1", 1);
    const nlohmann::json one_thread = run_json(command);
    ::unsetenv("TRAINFIT_THREADS");
    EXPECT_EQ(side_by_side, one_thread);
  }
}

}  // namespace
}  // namespace trainfit
