// GPU profiles: the parser reads what trainfit.calibrate writes and rejects anything else with
// one line naming the field (truncated and mutated files included, never a crash); the fit
// recovers the constants that made a profile's timings, and refuses a profile of another card.
#include "sources/calibration/gpu_profile.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "sources/calibration/gpu_profile_test_util.h"
#include "sources/parser_fuzz_test_util.h"

namespace trainfit {
namespace {

TEST(GpuProfile, ParsesWhatCalibrateWrites) {
  const GpuProfile want = synthetic_a100_profile();
  const Result<GpuProfile> got = parse_gpu_profile(to_json(want).dump(1), "gpu.json");
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->source, "gpu.json");
  EXPECT_EQ(got->device_name, want.device_name);
  EXPECT_EQ(got->sm_count, 108);
  EXPECT_EQ(got->compute_capability, 80);
  EXPECT_EQ(got->total_bytes, want.total_bytes);
  ASSERT_EQ(got->gemms.size(), want.gemms.size());
  EXPECT_EQ(got->gemms[13].math, MathPath::kTf32);
  EXPECT_EQ(got->gemms[13].m, 512);
  EXPECT_DOUBLE_EQ(got->gemms[13].seconds, want.gemms[13].seconds);
  ASSERT_EQ(got->convs.size(), want.convs.size());
  EXPECT_EQ(got->convs[0].kernel, 7);
  EXPECT_EQ(got->convs[0].padding, 3);
  ASSERT_EQ(got->copies.size(), 4U);
  EXPECT_DOUBLE_EQ(got->host_op_s, 9e-6);
  EXPECT_EQ(got->view_s, 1.5e-6);
  EXPECT_EQ(got->mode_call_share, 1.2);
  EXPECT_EQ(got->module_call_share, 0.4);
  EXPECT_FALSE(got->grad_edge_s.has_value());
}

TEST(GpuProfile, TheFitFindsTheConstantsThatMadeTheTimings) {
  const Result<CalibratedTiming> c =
      fit_gpu_profile(synthetic_a100_profile(), *find_gpu("a100-80gb"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const GpuTiming want = chosen_a100_timing();
  // The grid's step is 0.8%.
  EXPECT_NEAR(c->timing.efficiency.fp32_gemm, want.efficiency.fp32_gemm, 0.01);
  EXPECT_NEAR(c->timing.efficiency.tensor_gemm, want.efficiency.tensor_gemm, 0.01);
  EXPECT_NEAR(c->timing.efficiency.bandwidth, want.efficiency.bandwidth, 0.01);
  EXPECT_DOUBLE_EQ(c->timing.kernel_overhead_s, 3e-6);
  // The eager chains' times less the default launch.
  EXPECT_NEAR(c->timing.python_op_s, 7e-6, 1e-12);
  EXPECT_NEAR(c->timing.autograd_node_s, 4e-6, 1e-12);
  // The host's other work where measured; the catalog's constants where not.
  EXPECT_DOUBLE_EQ(c->timing.view_s, 1.5e-6);
  EXPECT_DOUBLE_EQ(c->timing.sync_s, 30e-6);
  EXPECT_DOUBLE_EQ(c->timing.mode_call_share, 1.2);
  EXPECT_DOUBLE_EQ(c->timing.module_call_share, 0.4);
  EXPECT_DOUBLE_EQ(c->timing.grad_edge_s, GpuTiming{}.grad_edge_s);
  EXPECT_DOUBLE_EQ(c->timing.cudnn_call_s, GpuTiming{}.cudnn_call_s);
  EXPECT_LT(c->calibration.median_error, 0.01);
  ASSERT_TRUE(c->calibration.catalog_median_error.has_value());
  EXPECT_GT(*c->calibration.catalog_median_error, 0.05);
  // Of the 58 timings, those the GPU finishes before the host issues the next fit nothing.
  EXPECT_GT(c->calibration.host_bound, 0);
  EXPECT_EQ(c->calibration.kernels + c->calibration.host_bound, 12 * 4 + 6 + 4);
  EXPECT_FALSE(c->timing.serial_epilogue);
}

TEST(GpuProfile, TimingsTheHostSetsFitNothing) {
  // An eager loop of 256-cubed products runs at the host's pace (here twice its 9 us an op),
  // not the GPU's: the fit must not move.
  GpuProfile p = synthetic_a100_profile();
  const Result<CalibratedTiming> clean = fit_gpu_profile(p, *find_gpu("a100-80gb"));
  for (GemmTiming& g : p.gemms) {
    if (g.m == 256) g.seconds = p.host_op_s * 2;
  }
  const Result<CalibratedTiming> c = fit_gpu_profile(p, *find_gpu("a100-80gb"));
  ASSERT_TRUE(clean.ok() && c.ok());
  EXPECT_EQ(c->calibration.kernels, clean->calibration.kernels);
  EXPECT_DOUBLE_EQ(c->timing.efficiency.tensor_gemm, clean->timing.efficiency.tensor_gemm);
  EXPECT_DOUBLE_EQ(c->timing.efficiency.fp32_gemm, clean->timing.efficiency.fp32_gemm);
  EXPECT_DOUBLE_EQ(c->calibration.median_error, clean->calibration.median_error);
  // A profile that times nothing but the host is refused.
  for (GemmTiming& g : p.gemms) g.m = g.n = g.k = 16;
  p.convs.clear();
  p.copies = {{64, 1e-6}};
  const Result<CalibratedTiming> none = fit_gpu_profile(p, *find_gpu("a100-80gb"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("none measures the GPU"), std::string::npos)
      << none.status().message();
}

TEST(GpuProfile, TheFitFindsWhetherProductsWriteTheirOutputAfterTheMath) {
  // The same constants with the epilogue after the math (Note [A product's epilogue]).
  GpuTiming serial = chosen_a100_timing();
  serial.serial_epilogue = true;
  GpuProfile p = synthetic_a100_profile();
  const std::vector<TimedKernel> kernels = profile_kernels(p);
  size_t i = 0;
  for (GemmTiming& g : p.gemms) g.seconds = kernel_seconds(kernels[i++].kernel, serial);
  for (ConvTiming& c : p.convs) c.seconds = kernel_seconds(kernels[i++].kernel, serial);
  const Result<CalibratedTiming> c = fit_gpu_profile(p, *find_gpu("a100-80gb"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->timing.serial_epilogue);
  EXPECT_NEAR(c->timing.efficiency.tensor_gemm, serial.efficiency.tensor_gemm, 0.01);
  EXPECT_LT(c->calibration.median_error, 0.01);
}

TEST(GpuProfile, ACardNotInTheCatalogTakesItsPeaksFromTheTimings) {
  GpuProfile p = synthetic_a100_profile();
  p.device_name = "Some Future GPU";
  DeviceProfile d = cuda_profile(std::nullopt);
  ASSERT_TRUE(apply_gpu_profile(p, d).ok());
  EXPECT_EQ(d.total_bytes, p.total_bytes);
  EXPECT_EQ(d.sm, 80);
  EXPECT_EQ(d.gpu_display, "Some Future GPU");
  ASSERT_TRUE(d.timing && d.calibration);
  EXPECT_FALSE(d.calibration->catalog_median_error.has_value());
  EXPECT_EQ(d.timing->peaks.sm_count, 108);
  EXPECT_GT(d.timing->peaks.fp16_tflops, d.timing->peaks.tf32_tflops);
  EXPECT_GT(d.timing->peaks.tf32_tflops, d.timing->peaks.fp32_tflops);
  EXPECT_LT(d.calibration->median_error, 0.05);
}

TEST(GpuProfile, AProfileOfAnotherCardIsRefused) {
  DeviceProfile d = cuda_profile(*find_gpu("rtx4090"));
  const Status s = apply_gpu_profile(synthetic_a100_profile(), d);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("measured on NVIDIA A100-SXM4-80GB (108 SMs), not on the rtx4090"),
            std::string::npos)
      << s.message();
}

TEST(GpuProfile, BadFieldsAreNamed) {
  const nlohmann::json good = to_json(synthetic_a100_profile());
  const auto error_of = [&](const std::function<void(nlohmann::json&)>& spoil) {
    nlohmann::json j = good;
    spoil(j);
    const Result<GpuProfile> p = parse_gpu_profile(j.dump(), "gpu.json");
    return p.ok() ? std::string("(accepted)") : p.status().to_string();
  };
  const std::pair<std::function<void(nlohmann::json&)>, std::string> cases[] = {
      {[](nlohmann::json& j) { j["format"] = "trainfit-trace"; }, "not a trainfit GPU profile"},
      {[](nlohmann::json& j) { j["version"] = 2; }, "version 2"},
      {[](nlohmann::json& j) { j.erase("device"); }, "'device'"},
      {[](nlohmann::json& j) { j["device"]["sm_count"] = 0; }, "device: 'sm_count'"},
      {[](nlohmann::json& j) { j["device"]["compute_capability"] = "8.0"; },
       "'compute_capability'"},
      {[](nlohmann::json& j) { j["gemm"] = nlohmann::json::array(); }, "'gemm'"},
      {[](nlohmann::json& j) { j["gemm"][3]["math"] = "fp8"; }, "gemm[3]: unknown math 'fp8'"},
      {[](nlohmann::json& j) { j["gemm"] = {j["gemm"][20]}; }, "'gemm' has no fp32 product"},
      {[](nlohmann::json& j) { j["gemm"][0]["seconds"] = -1; }, "gemm[0]: 'seconds'"},
      {[](nlohmann::json& j) { j["gemm"][0]["m"] = int64_t{1} << 40; }, "gemm[0]: 'm'"},
      {[](nlohmann::json& j) { j["conv"][1]["kernel"] = 999; }, "conv[1]: the kernel"},
      {[](nlohmann::json& j) { j["copy"][0] = 5; }, "copy[0]: must be an object"},
      {[](nlohmann::json& j) { j["host_op_s"] = "fast"; }, "'host_op_s' must be a number"},
      {[](nlohmann::json& j) { j["host"] = 3; }, "'host' must be an object"},
      {[](nlohmann::json& j) { j["host"]["sync_s"] = 0; }, "host: 'sync_s' must be above 0"},
      {[](nlohmann::json& j) { j["host"]["view_s"] = "1us"; }, "host: 'view_s' must be a number"},
      {[](nlohmann::json& j) { j = nlohmann::json::array(); }, "must be a JSON object"},
  };
  for (const auto& [spoil, want] : cases) {
    const std::string got = error_of(spoil);
    EXPECT_NE(got.find(want), std::string::npos) << got;
    EXPECT_NE(got.find("gpu.json"), std::string::npos) << got;
    EXPECT_NE(got.find("trainfit.calibrate"), std::string::npos) << got;
    EXPECT_EQ(got.find('\n'), std::string::npos) << got;
  }
}

TEST(GpuProfile, TruncatedAndMutatedFilesAreErrorsNotCrashes) {
  const std::string text = to_json(synthetic_a100_profile()).dump();
  const int refused = fuzz_parser(
      text, 7, [](std::string_view t) { return parse_gpu_profile(t, "fuzzed.json"); },
      [](const GpuProfile& p) { EXPECT_FALSE(p.gemms.empty()); });
  // Three random bytes in a profile's JSON break it far more often than not.
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace trainfit
