#include "cli/cli.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_test_util.h"
#include "graph/op_registry.h"
#include "sources/calibration/gpu_profile_test_util.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

TEST(Cli, SummaryJsonIsOneObject) {
  const CliRun r = run({"summary", "--model", "resnet18", "--json", "--depth", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["parameters"], 11'689'512);
  EXPECT_EQ(j["trainable_parameters"], 11'689'512);
  EXPECT_GT(j["activation_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["modules"].size(), 12U);  // the model, its 10 children, the loss
}

TEST(Cli, SummaryTextHasTotals) {
  const CliRun r = run({"summary", "--model", "gpt2", "--seq-len", "64", "--depth", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("124,439,808"), std::string::npos);
  EXPECT_NE(r.out.find("Kept for backward"), std::string::npos);
}

TEST(Cli, ModelsListsKeys) {
  const CliRun r = run({"models"});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("resnet50"), std::string::npos);
  EXPECT_NE(r.out.find("num_classes=1000"), std::string::npos);
  EXPECT_NE(r.out.find("attention=sdpa [sdpa|eager]"), std::string::npos);
  const CliRun j = run({"models", "--json"});
  EXPECT_EQ(nlohmann::json::parse(j.out)["models"].size(), model_zoo().size());
}

TEST(Cli, OpsListsTheRegistry) {
  const CliRun r = run({"ops", "--json"});
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["ops"].size(), op_registry().ops().size());
}

TEST(Cli, EstimateJsonFollowsTheContract) {
  const CliRun r =
      run({"estimate", "--model", "resnet18", "--batch", "8", "--gpu", "rtx4090", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key :
       {"parameters", "trainable_parameters", "activation_bytes", "peak_allocated_bytes",
        "peak_reserved_bytes", "device_used_bytes", "peak_phase", "breakdown", "gpu", "fits"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_TRUE(j["fits"].get<bool>());
  const std::string phase = j["peak_phase"];
  EXPECT_TRUE(phase == "forward" || phase == "backward" || phase == "optimizer") << phase;
  int64_t total = 0;
  for (const auto& [k, v] : j["breakdown"].items()) total += v.get<int64_t>();
  EXPECT_EQ(total, j["device_used_bytes"].get<int64_t>());
}

TEST(Cli, EstimateOnAGpuHasTheStepTime) {
  const CliRun r = run({"estimate", "--model", "resnet18", "--batch", "8", "--gpu", "rtx4090",
                        "--dataset-size", "1000", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const double step = j.at("step_time_s");
  EXPECT_GT(step, 0);
  EXPECT_NEAR(j.at("samples_per_s").get<double>(), 8 / step, 1e-9);
  double parts = 0;
  for (const char* key : {"forward_s", "backward_s", "recompute_s", "optimizer_s"}) {
    parts += j.at("time_breakdown").at(key).get<double>();
  }
  EXPECT_NEAR(parts, step, 1e-12);
  // Each part's two clocks: the kernels add up to the GPU's busy time, and the step lasts as
  // long as both the host and the GPU take (a part's host work may overlap the part before it).
  const auto& t = j.at("time_breakdown");
  double gpu = 0;
  double host = 0;
  for (const char* part : {"forward", "backward", "recompute", "optimizer"}) {
    const std::string p = part;
    EXPECT_GE(t.at(p + "_host_s").get<double>(), 0) << p;
    gpu += t.at(p + "_gpu_s").get<double>();
    host += t.at(p + "_host_s").get<double>();
  }
  EXPECT_GT(t.at("forward_host_s").get<double>(), 0);
  EXPECT_NEAR(gpu, t.at("gpu_busy_s").get<double>(), 1e-12);
  EXPECT_LE(std::max(gpu, host), step + 1e-12);
  EXPECT_EQ(j.at("epoch_steps").get<int64_t>(), 125);
  EXPECT_NEAR(j.at("epoch_time_s").get<double>(), 125 * step, 1e-9);
  // Without a GPU there is nothing to time.
  const CliRun none = run({"estimate", "--model", "resnet18", "--json"});
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_FALSE(nlohmann::json::parse(none.out).contains("step_time_s"));
}

// A profile file made by the step-time model with chosen constants (gpu_profile_test_util.h).
std::string write_profile(const std::string& name, const std::string& text) {
  std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, GpuProfileReplacesTheCatalogsConstants) {
  const std::string path = write_profile("a100.json", to_json(synthetic_a100_profile()).dump());
  const std::vector<std::string> base = {"estimate", "--model", "resnet50", "--batch",
                                         "64",       "--gpu",   "a100-80gb"};
  const nlohmann::json catalog = run_json(base);
  const nlohmann::json fitted = run_json(concat(base, {"--gpu-profile", path}));
  // Memory does not depend on the profile; the step time does, and it is the chosen constants'.
  EXPECT_EQ(fitted["peak_reserved_bytes"], catalog["peak_reserved_bytes"]);
  EXPECT_NE(fitted["step_time_s"], catalog["step_time_s"]);
  EXPECT_EQ(fitted["gpu_profile"]["file"], path);
  EXPECT_LT(fitted["gpu_profile"]["median_error"].get<double>(), 0.01);
  EXPECT_GT(fitted["gpu_profile"]["catalog_median_error"].get<double>(), 0.05);
  const CliRun text = run(concat(base, {"--gpu-profile", path}));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("constants fitted to " + path + " (NVIDIA A100-SXM4-80GB)"),
            std::string::npos)
      << text.out;
  // The profile's smallest products are shorter than its host's op: the report counts them out.
  const int host_bound = fitted["gpu_profile"]["host_bound_kernels"].get<int>();
  EXPECT_GT(host_bound, 0);
  EXPECT_EQ(fitted["gpu_profile"]["kernels"].get<int>() + host_bound, 12 * 4 + 6 + 4);
  EXPECT_NE(text.out.find("; " + std::to_string(host_bound) + " left out as host-bound"),
            std::string::npos)
      << text.out;
  // Without --gpu the profile names the card: its memory, its constants.
  const nlohmann::json alone =
      run_json({"estimate", "--model", "resnet50", "--batch", "64", "--gpu-profile", path});
  EXPECT_EQ(alone["gpu"]["total_bytes"], int64_t{80} << 30);
  EXPECT_GT(alone["step_time_s"].get<double>(), 0);
}

TEST(Cli, ABadGpuProfileIsOneLine) {
  const std::string good = to_json(synthetic_a100_profile()).dump();
  const std::vector<std::pair<std::string, std::string>> files = {
      {"missing", ""},
      {"empty.json", ""},
      {"cut.json", good.substr(0, good.size() / 2)},
      {"trace.json", R"({"format": "trainfit-trace", "version": 1})"},
      {"garbage.json", "\x7f\x45\x4c\x46 not json"},
  };
  for (const auto& [name, text] : files) {
    const std::string path =
        name == "missing" ? testing::TempDir() + "no-such-profile.json" : write_profile(name, text);
    const CliRun r =
        run({"estimate", "--model", "resnet50", "--gpu", "a100-80gb", "--gpu-profile", path});
    EXPECT_EQ(r.code, kExitBadInput) << name;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("trainfit.calibrate"), std::string::npos) << r.err;
  }
  const std::string a100 = write_profile("a100.json", good);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"estimate", "--model", "resnet50", "--gpu", "rtx4090", "--gpu-profile", a100},
           {"estimate", "--model", "resnet50", "--device-profile", "cpu", "--gpu-profile", a100},
           {"fit", "--model", "resnet50", "--gpu", "all", "--gpu-profile", a100},
       }) {
    const CliRun r = run(args);
    EXPECT_EQ(r.code, kExitBadInput) << args[3];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// The training-loop knobs refuse what they cannot mean in one line each.
TEST(Cli, LoopScalerAndBenchmarkKnobsRefuseNonsense) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"estimate", "--model", "resnet50", "--loop", "later"},
           {"estimate", "--model", "resnet50", "--grad-scaler-skips", "2"},
           {"estimate", "--model", "resnet50", "--precision", "amp-fp16", "--grad-scaler-skips",
            "-1"},
       }) {
    const CliRun r = run(args);
    EXPECT_EQ(r.code, kExitBadInput) << args[4];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // Benchmark mode adds its trials to the first iteration: resnet50 at batch 64 on an H100
  // allocates 10.9 GB (the recorded 10,917,709,824), 5.9 GB without.
  const nlohmann::json bench =
      run_json({"estimate", "--model", "resnet50", "--batch", "64", "--optimizer", "momentum",
                "--gpu", "h100-80gb", "--cudnn-benchmark", "--loop", "scoped"});
  const nlohmann::json plain =
      run_json({"estimate", "--model", "resnet50", "--batch", "64", "--optimizer", "momentum",
                "--gpu", "h100-80gb", "--loop", "scoped"});
  EXPECT_EQ(bench["peak_allocated_bytes"], int64_t{10917709824});
  EXPECT_LT(plain["peak_allocated_bytes"].get<int64_t>(), int64_t{6} << 30);
  EXPECT_EQ(bench["cuda_context_source"], "measured");
}

TEST(Cli, EstimateTextAndTimeline) {
  const std::string csv = testing::TempDir() + "timeline.csv";
  const CliRun r =
      run({"estimate", "--model", "resnet18", "--timeline", csv, "--optimizer", "sgd"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("peak allocated"), std::string::npos);
  std::ifstream f(csv);
  std::string header;
  std::getline(f, header);
  EXPECT_EQ(header,
            "event,iteration,phase,module,op,action,category,bytes,allocated_bytes,"
            "reserved_bytes");
  int rows = 0;
  for (std::string line; std::getline(f, line);) ++rows;
  EXPECT_GT(rows, 100);
}

// estimate and fit name the strategy and FSDP's mixed precision, and its JSON records it: the
// model is fp32, the shards stay fp32 and the gathered units are bf16 (half the bytes).
TEST(Cli, FsdpMixedPrecisionIsNamedAndGathersHalfTheBytes) {
  const std::vector<std::string> args = {
      "--model", "gpt2",        "--batch",         "2",     "--gpus",   "2", "--strategy",
      "fsdp",    "--fsdp-wrap", "transformer.h.*", "--gpu", "a100-80gb"};
  std::vector<std::string> mixed = args;
  mixed.insert(mixed.end(), {"--fsdp-mixed-precision", "bf16"});
  const CliRun e = run(concat({"estimate"}, mixed));
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("fp32 model computing in bf16 (FSDP MixedPrecision)"), std::string::npos);
  EXPECT_NE(e.out.find("FSDP (full_shard) over 2 GPUs"), std::string::npos) << e.out;
  const CliRun f = run(concat({"fit"}, mixed));
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_NE(f.out.find("FSDP (full_shard) over 2 GPUs"), std::string::npos) << f.out;
  const nlohmann::json full = run_json(concat({"estimate"}, args));
  const nlohmann::json half = run_json(concat({"estimate"}, mixed));
  EXPECT_EQ(half["fsdp"]["mixed_precision"], "bf16");
  EXPECT_EQ(full["fsdp"]["mixed_precision"], "none");
  ASSERT_EQ(half["fsdp"]["units"].size(), full["fsdp"]["units"].size());
  for (size_t u = 0; u < half["fsdp"]["units"].size(); ++u) {
    const nlohmann::json& h = half["fsdp"]["units"][u];
    const nlohmann::json& f32 = full["fsdp"]["units"][u];
    EXPECT_EQ(2 * h["padded_bytes"].get<int64_t>(), f32["padded_bytes"].get<int64_t>());
    EXPECT_EQ(h["shard_bytes"], f32["shard_bytes"]);
  }
}

TEST(Cli, CompareRunsEachModelWithItsOwnOptions) {
  // --gpu before the first --model applies to both; each model has its own batch.
  const CliRun r = run({"compare", "--gpu", "rtx4090", "--model", "act", "--batch", "4", "--set",
                        "cameras=320x240", "--model", "diffusion", "--batch", "8", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto models = nlohmann::json::parse(r.out)["models"];
  ASSERT_EQ(models.size(), 2U);
  EXPECT_EQ(models[0]["model"], "act");
  EXPECT_EQ(models[0]["batch"], 4);
  EXPECT_EQ(models[0]["sets"]["cameras"], "320x240");
  EXPECT_EQ(models[1]["batch"], 8);
  EXPECT_EQ(models[1]["optimizer"], "adam");  // Diffusion's preset
  for (const auto& m : models) {
    EXPECT_EQ(m["gpu"]["name"], "rtx4090");
    int64_t params = 0, kept = 0;
    for (const auto& b : m["blocks"]) {
      params += b["parameters"].get<int64_t>();
      kept += b["kept_bytes_per_sample"].get<int64_t>();
    }
    EXPECT_EQ(params, m["parameters"].get<int64_t>());
    EXPECT_EQ(kept, m["activation_bytes_per_sample"].get<int64_t>());
    EXPECT_TRUE(m.contains("dominant"));
  }
  EXPECT_GT(models[0]["attention_bytes_per_sample"].get<int64_t>(), 0);
  EXPECT_EQ(models[1]["attention_bytes_per_sample"].get<int64_t>(), 0);
  // The same per-model figures as estimate gives on its own.
  const CliRun alone =
      run({"estimate", "--model", "diffusion", "--batch", "8", "--gpu", "rtx4090", "--json"});
  ASSERT_EQ(alone.code, 0) << alone.err;
  EXPECT_EQ(models[1]["peak_reserved_bytes"],
            nlohmann::json::parse(alone.out)["peak_reserved_bytes"]);
  // A model's own value wins over the shared one.
  const CliRun over = run({"compare", "--batch", "2", "--model", "resnet18", "--model", "resnet18",
                           "--batch", "3", "--json"});
  ASSERT_EQ(over.code, 0) << over.err;
  EXPECT_EQ(nlohmann::json::parse(over.out)["models"][0]["batch"], 2);
  EXPECT_EQ(nlohmann::json::parse(over.out)["models"][1]["batch"], 3);
  const CliRun text = run({"compare", "--model", "act", "--model", "diffusion"});
  ASSERT_EQ(text.code, 0) << text.err;
  for (const char* row : {"parameters", "kept per sample", "attention matrices", "peak allocated",
                          "peak reserved", "peak in", "dominated by", "encoder_tokens 302"}) {
    EXPECT_NE(text.out.find(row), std::string::npos) << row;
  }
  EXPECT_NE(run({"compare", "--help"}).out.find("--set"), std::string::npos);
}

TEST(Cli, GpusListsTheCatalog) {
  const CliRun r = run({"gpus"});
  ASSERT_EQ(r.code, 0);
  for (const char* gpu :
       {"rtx3060", "rtx3090", "rtx4090", "rtx5090", "a10", "l4", "t4", "v100-16gb", "v100-32gb",
        "a100-40gb", "a100-80gb", "h100-80gb", "h200"}) {
    EXPECT_NE(r.out.find(gpu), std::string::npos) << gpu;
  }
  const CliRun j = run({"gpus", "--json"});
  ASSERT_EQ(j.code, 0);
  const auto gpus = nlohmann::json::parse(j.out)["gpus"];
  const auto rtx4090 =
      std::find_if(gpus.begin(), gpus.end(), [](const auto& g) { return g["name"] == "rtx4090"; });
  ASSERT_NE(rtx4090, gpus.end());
  EXPECT_EQ((*rtx4090)["sm_count"], 128);
  EXPECT_DOUBLE_EQ((*rtx4090)["fp16_flops"].get<double>(), 165.2e12);  // Ada whitepaper
  EXPECT_DOUBLE_EQ((*rtx4090)["memory_bandwidth_bytes_per_s"].get<double>(), 1008e9);
}

TEST(Cli, HelpTeaches) {
  const CliRun r = run({"summary", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--model"), std::string::npos);
  EXPECT_NE(r.out.find("Examples"), std::string::npos);
  EXPECT_EQ(run({"--help"}).code, 0);
}

TEST(Cli, BadInputIsOneLineWithAHintAndExitCode2) {
  const std::vector<std::vector<std::string>> bad = {
      {"summary", "--model", "resnet5"},
      {"summary", "--model", "resnet50", "--set", "num_class=10"},
      {"summary", "--model", "resnet50", "--set", "num_classes"},
      {"summary", "--model", "resnet50", "--set", "num_classes=ten"},
      {"summary", "--model", "vgg16", "--input", "3x16x16"},
      {"summary", "--model", "vit_b_16", "--input", "3x225x225"},
      {"summary", "--model", "resnet50", "--input", "3x224"},
      {"summary", "--model", "resnet50", "--input", "3xax224"},
      {"summary", "--model", "resnet50", "--batch", "0"},
      {"summary", "--model", "resnet50", "--batch", "99999999999999999"},
      {"summary", "--model", "resnet50", "--precision", "fp64"},
      {"summary", "--model", "resnet50", "--device-profile", "tpu"},
      {"summary", "--model", "resnet50", "--device-profile", "cpu", "--precision", "amp-fp16"},
      {"summary", "--model", "resnet50", "--freeze", "backbone"},
      {"summary", "--model", "gpt2", "--seq-len", "4096"},
      {"summary", "--model", "resnet50", "--bogus"},
      {"estimate", "--model", "resnet50", "--gpu", "rtx9090"},
      {"estimate", "--model", "resnet50", "--gpu-memory", "lots"},
      {"estimate", "--model", "resnet50", "--gpu", "t4", "--gpu-memory", "16GiB"},
      {"estimate", "--model", "resnet50", "--optimizer", "lion"},
      {"estimate", "--model", "resnet50", "--optimizer-impl", "vectorized"},
      {"estimate", "--model", "resnet50", "--checkpoint", "encoder.*"},
      {"estimate", "--model", "resnet50", "--grad-accum", "0"},
      {"estimate", "--model", "resnet50", "--gpu", "a100-80gb", "--memory-format", "nhwc"},
      {"estimate", "--model", "resnet50", "--gpu", "a100-80gb", "--dataset-size", "0"},
      {"estimate", "--model", "resnet50", "--gpu", "a100-80gb", "--dataset-size", "-5"},
      {"estimate", "--model", "resnet50", "--gpu", "a100-80gb", "--dataset-size", "many"},
      {"compare", "--model", "resnet50"},
      {"compare", "--batch", "2"},
      {"compare", "--model", "resnet50", "--model", "resnt50"},
      {"compare", "--model", "resnet50", "--bogus", "--model", "act"},
      {"compare", "--model", "act", "--set", "cameras=wide", "--model", "diffusion"},
      {"compare", "--model", "resnet18", "--model", "resnet18", "--device-profile", "cpu"},
      {"estimate", "--model", "resnet50", "--max-split-size", "8MiB"},
      {"estimate", "--model", "resnet50", "--device-profile", "cpu", "--gpu", "t4"},
      {"estimate", "--model", "resnet50", "--device-profile", "cpu", "--optimizer-impl", "fused"},
      {"estimate", "--model", "resnet50", "--timeline", "/nonexistent/dir/t.csv"},
      {"estimate", "--model", "resnet50", "--gpu", "rtx4090", "--gpus", "2", "--link", "pcie9"},
      {"estimate", "--model", "resnet50", "--gpus", "2", "--link", "pcie4"},  // no GPU to time
      {"estimate", "--model", "resnet50", "--gpu", "rtx4090", "--gpus", "2", "--bus-bandwidth",
       "-3"},
      {"estimate", "--model", "resnet50", "--gpu", "rtx4090", "--gpus", "2", "--bus-bandwidth",
       "fast"},
      {"estimate", "--model", "resnet50", "--device-profile", "cpu", "--link", "nvlink3"},
      {"estimate", "--model", "resnet50", "--gpus", "2", "--nodes", "0"},
      {"estimate", "--model", "resnet50", "--gpus", "2", "--network", "200"},  // one node
      {"estimate", "--model", "resnet50", "--gpus", "2", "--nodes", "2", "--network", "-5"},
      {"estimate", "--model", "resnet50", "--gpus", "8", "--nodes", "1000"},
      {"estimate", "--model", "resnet50", "--gpus", "2", "--fsdp-wrap", "layer1"},  // ddp
      {"estimate", "--model", "resnet50", "--gpus", "2", "--strategy", "fsdp", "--fsdp-sharding",
       "hybrid"},
      {"estimate", "--model", "resnet50", "--gpus", "2", "--strategy", "fsdp", "--fsdp-wrap",
       "encoder.layers.*"},
      {"estimate", "--model", "resnet50", "--gpus", "2", "--strategy", "fsdp", "--fsdp-wrap",
       "layer1,layer1.0"},  // nested
      {"estimate", "--model", "resnet50", "--gpus", "2", "--strategy", "fsdp",
       "--fsdp-mixed-precision", "bf16"},  // BatchNorm units
      {"estimate", "--model", "vit_b_16", "--gpus", "2", "--strategy", "fsdp",
       "--fsdp-mixed-precision", "fp16"},
      {"estimate", "--model", "vit_b_16", "--gpus", "2", "--strategy", "fsdp",
       "--fsdp-mixed-precision", "int4"},
      {"estimate", "--model", "vit_b_16", "--gpus", "2", "--fsdp-mixed-precision", "bf16"},  // ddp
      {"estimate", "--model", "vit_b_16", "--gpus", "2", "--strategy", "fsdp",
       "--fsdp-mixed-precision", "bf16", "--precision", "amp-bf16"},
      {"estimate", "--model", "resnet50", "--gpus", "2", "--strategy", "zero3"},
      {"summary"},
      {"frobnicate"},
      {},
  };
  for (const auto& args : bad) {
    const CliRun r = run(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << joined;
    EXPECT_EQ(lines(r.err), 1) << joined << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("trainfit: error: ", 0), 0U) << r.err;
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << joined << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << joined;
  }
}

TEST(Cli, AMistypedCommandIsNamedWithTheNearestOne) {
  const CliRun r = run({"estmate", "--model", "resnet50"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "trainfit: error: unknown command 'estmate' (hint: did you mean 'estimate'? see "
            "trainfit --help)\n");
  const CliRun none = run({});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no command given"), std::string::npos) << none.err;
}

TEST(Cli, VersionPrintsTheProjectVersion) {
  const CliRun r = run({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "trainfit " TRAINFIT_TEST_VERSION "\n");
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(Cli, AMissingTraceFileIsNamed) {
  const CliRun r = run({"estimate", "--trace", "/nonexistent/model.trace.json", "--batch", "8"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/model.trace.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace trainfit
