#include "sources/calibration/gpu_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "graph/device_rules.h"
#include "sources/json_fields.h"

namespace trainfit {
namespace {

using nlohmann::json;

constexpr std::string_view kHint =
    "write it with `python3 -m trainfit.calibrate --out FILE` on the machine that trains";
// Bounds that keep every product of sizes well inside 64 bits.
constexpr int64_t kMaxGemmDim = int64_t{1} << 20;
constexpr int64_t kMaxConvDim = int64_t{1} << 16;
constexpr double kMaxSeconds = 3600;

Result<MathPath> math_of(const JsonFields& f) {
  TF_ASSIGN_OR_RETURN(const std::string name, f.string("math"));
  const std::optional<MathPath> math = kMathPathNames.parse(name);
  if (!math) return f.error(fmt::format("unknown math '{}' (use {})", name, kMathPathNames.list()));
  return *math;
}

Result<GemmTiming> parse_gemm(const JsonFields& f) {
  static constexpr std::array<IntegerField<GemmTiming>, 3> kSizes = {{
      {"m", &GemmTiming::m, 1, kMaxGemmDim},
      {"n", &GemmTiming::n, 1, kMaxGemmDim},
      {"k", &GemmTiming::k, 1, kMaxGemmDim},
  }};
  GemmTiming g;
  TF_ASSIGN_OR_RETURN(g.math, math_of(f));
  TF_RETURN_IF_ERROR(read_integers(f, kSizes, g));
  TF_ASSIGN_OR_RETURN(g.seconds, f.positive("seconds", kMaxSeconds));
  return g;
}

Result<ConvTiming> parse_conv(const JsonFields& f) {
  static constexpr std::array<IntegerField<ConvTiming>, 8> kSizes = {{
      {"n", &ConvTiming::n, 1, kMaxConvDim},
      {"c", &ConvTiming::c, 1, kMaxConvDim},
      {"h", &ConvTiming::h, 1, kMaxConvDim},
      {"w", &ConvTiming::w, 1, kMaxConvDim},
      {"out_channels", &ConvTiming::out_channels, 1, kMaxConvDim},
      {"kernel", &ConvTiming::kernel, 1, kMaxConvDim},
      {"stride", &ConvTiming::stride, 1, kMaxConvDim},
      {"padding", &ConvTiming::padding, 0, kMaxConvDim},
  }};
  ConvTiming c;
  TF_ASSIGN_OR_RETURN(c.math, math_of(f));
  TF_RETURN_IF_ERROR(read_integers(f, kSizes, c));
  if (std::min(c.h, c.w) + 2 * c.padding < c.kernel) {
    return f.error("the kernel is larger than the padded input");
  }
  TF_ASSIGN_OR_RETURN(c.seconds, f.positive("seconds", kMaxSeconds));
  return c;
}

Result<CopyTiming> parse_copy(const JsonFields& f) {
  CopyTiming c;
  TF_ASSIGN_OR_RETURN(c.bytes, f.integer_in("bytes", 1, int64_t{1} << 44));
  TF_ASSIGN_OR_RETURN(c.seconds, f.positive("seconds", kMaxSeconds));
  return c;
}

// Every element of the list `key` parsed by `parse`; at least `min` of them.
template <typename T, typename Parse>
Result<std::vector<T>> parse_list(const JsonFields& f, const char* key, size_t min, Parse parse) {
  TF_ASSIGN_OR_RETURN(const json* list, f.array(key));
  if (list->size() < min) return f.error(fmt::format("'{}' must hold at least {}", key, min));
  std::vector<T> out;
  for (size_t i = 0; i < list->size(); ++i) {
    TF_ASSIGN_OR_RETURN(const JsonFields item, object_at(*list, i, key, kHint));
    TF_ASSIGN_OR_RETURN(T parsed, parse(item));
    out.push_back(parsed);
  }
  return out;
}

Result<GpuProfile> parse_document(const json& doc) {
  if (!doc.is_object()) return parse_error("profile: must be a JSON object", std::string(kHint));
  const JsonFields f(doc, "profile", kHint);
  TF_ASSIGN_OR_RETURN(const std::string format, f.string("format"));
  if (format != kGpuProfileFormat) {
    return f.error(fmt::format("'format' is '{}': not a trainfit GPU profile", format));
  }
  TF_ASSIGN_OR_RETURN(const int64_t version, f.integer("version", 1));
  if (version != kGpuProfileVersion) {
    return f.error(
        fmt::format("version {}; this trainfit reads version {}", version, kGpuProfileVersion));
  }
  GpuProfile p;
  if (!doc.contains("device") || !doc.at("device").is_object()) {
    return f.error("'device' must be an object");
  }
  const JsonFields d(doc.at("device"), "device", kHint);
  TF_ASSIGN_OR_RETURN(p.device_name, d.string("name"));
  TF_ASSIGN_OR_RETURN(const int64_t sms, d.integer_in("sm_count", 1, 4096));
  p.sm_count = static_cast<int>(sms);
  TF_ASSIGN_OR_RETURN(const json* cc, d.array("compute_capability"));
  if (cc->size() != 2 || !(*cc)[0].is_number_integer() || !(*cc)[1].is_number_integer() ||
      (*cc)[0].get<int64_t>() < 0 || (*cc)[0].get<int64_t>() > 99 || (*cc)[1].get<int64_t>() < 0 ||
      (*cc)[1].get<int64_t>() > 9) {
    return d.error("'compute_capability' must be [major, minor], e.g. [8, 0]");
  }
  p.compute_capability = static_cast<int>((*cc)[0].get<int64_t>() * 10 + (*cc)[1].get<int64_t>());
  TF_ASSIGN_OR_RETURN(p.total_bytes, d.integer_in("total_bytes", 1, int64_t{1} << 50));
  TF_ASSIGN_OR_RETURN(p.gemms, parse_list<GemmTiming>(f, "gemm", 1, parse_gemm));
  // Every card has FP32 products; a card the catalog lacks takes its FP32 peak from them.
  if (std::none_of(p.gemms.begin(), p.gemms.end(),
                   [](const GemmTiming& g) { return g.math == MathPath::kFp32; })) {
    return f.error("'gemm' has no fp32 product");
  }
  TF_ASSIGN_OR_RETURN(p.convs, parse_list<ConvTiming>(f, "conv", 0, parse_conv));
  TF_ASSIGN_OR_RETURN(p.copies, parse_list<CopyTiming>(f, "copy", 1, parse_copy));
  TF_ASSIGN_OR_RETURN(p.empty_kernel_s, f.positive("empty_kernel_s", 1));
  TF_ASSIGN_OR_RETURN(p.host_op_s, f.positive("host_op_s", 1));
  TF_ASSIGN_OR_RETURN(p.autograd_node_s, f.positive("autograd_node_s", 1));
  // Profiles written before the host's other work was measured have no "host".
  if (f.has("host")) {
    if (!doc.at("host").is_object()) return f.error("'host' must be an object");
    const JsonFields h(doc.at("host"), "host", kHint);
    const std::pair<const char*, std::optional<double>*> fields[] = {
        {"view_s", &p.view_s},
        {"grad_edge_s", &p.grad_edge_s},
        {"param_loop_s", &p.param_loop_s},
        {"mode_call_share", &p.mode_call_share},
        {"module_call_share", &p.module_call_share},
        {"sync_s", &p.sync_s},
        {"cudnn_call_s", &p.cudnn_call_s}};
    for (const auto& [key, value] : fields) {
      if (!h.has(key)) continue;
      // A share may pass 1 (a mode that more than doubles a call); the seconds stay under one.
      const double max = std::string_view(key).ends_with("_share") ? 100 : 1;
      TF_ASSIGN_OR_RETURN(*value, h.positive(key, max));
    }
  }
  return p;
}

KernelCost product(MathPath math, int64_t m, int64_t n, int64_t k, double bytes) {
  KernelCost kc;
  kc.is_gemm = true;
  kc.gemm.m = m;
  kc.gemm.n = n;
  kc.gemm.k = k;
  kc.flops = kc.gemm.flops();
  kc.bytes = bytes;
  kc.math = math;
  return kc;
}

// The timings' best rates, as peaks for a card the catalog does not have.
GpuTiming measured_peaks(const GpuProfile& p) {
  GpuTiming t;
  t.peaks.sm_count = p.sm_count;
  t.sm = p.compute_capability;
  for (const TimedKernel& tk : profile_kernels(p)) {
    const KernelCost& k = tk.kernel;
    if (!k.is_gemm) {
      t.peaks.bandwidth_gbps = std::max(t.peaks.bandwidth_gbps, k.bytes / tk.seconds / 1e9);
      continue;
    }
    const double tflops = k.flops / tk.seconds / 1e12;
    double& peak = k.math == MathPath::kFp32   ? t.peaks.fp32_tflops
                   : k.math == MathPath::kTf32 ? t.peaks.tf32_tflops
                                               : t.peaks.fp16_tflops;
    peak = std::max(peak, tflops);
  }
  t.efficiency = {1, 1, 1};
  return t;
}

// The mean |log(predicted / measured)| over `kernels`: every timing pulls, each by how far it
// is off by a factor (a median lets half of them drift where the knobs are coupled).
double mean_log_error(const std::vector<TimedKernel>& kernels, const GpuTiming& timing) {
  double sum = 0;
  for (const TimedKernel& k : kernels)
    sum += std::abs(std::log(kernel_seconds(k.kernel, timing) / k.seconds));
  return sum / static_cast<double>(kernels.size());
}

// The value of `*knob` that minimizes the mean log error over the kernels it governs (those
// whose predicted time moves with it), on a log-spaced grid.
void fit_knob(const std::vector<TimedKernel>& kernels, GpuTiming& t, double* knob) {
  const double was = *knob;
  std::vector<TimedKernel> governed;
  for (const TimedKernel& k : kernels) {
    const double before = kernel_seconds(k.kernel, t);
    *knob = was * 1.25;
    const double after = kernel_seconds(k.kernel, t);
    *knob = was;
    if (after != before) governed.push_back(k);
  }
  if (governed.empty()) return;
  constexpr int kSteps = 500;
  constexpr double kLow = 0.02;
  constexpr double kHigh = 1.5;
  double best = was;
  double best_error = mean_log_error(governed, t);
  for (int i = 0; i <= kSteps; ++i) {
    *knob = kLow * std::pow(kHigh / kLow, static_cast<double>(i) / kSteps);
    const double e = mean_log_error(governed, t);
    if (e < best_error) {
      best_error = e;
      best = *knob;
    }
  }
  *knob = best;
}

// The efficiencies that time `kernels` best. Bandwidth first: products are bounded by it as
// well, and pay their epilogue at it. Rounds until they settle (the coupling is stronger where
// the epilogue follows the math).
void fit_efficiencies(const std::vector<TimedKernel>& kernels, GpuTiming& t) {
  GpuEfficiency& e = t.efficiency;
  constexpr int kMaxRounds = 8;
  for (int round = 0; round < kMaxRounds; ++round) {
    const GpuEfficiency was = e;
    for (double* knob : {&e.bandwidth, &e.fp32_gemm, &e.tensor_gemm, &e.im2col_gather}) {
      fit_knob(kernels, t, knob);
    }
    if (e.bandwidth == was.bandwidth && e.fp32_gemm == was.fp32_gemm &&
        e.tensor_gemm == was.tensor_gemm && e.im2col_gather == was.im2col_gather)
      break;
  }
}

}  // namespace

Result<GpuProfile> parse_gpu_profile(std::string_view text, std::string_view source) {
  TF_ASSIGN_OR_RETURN(const json doc, parse_json_file(text, source, kHint));
  Result<GpuProfile> p = parse_document(doc);
  if (!p.ok()) return p.status().with_context(std::string(source));
  p->source = std::string(source);
  return p;
}

std::vector<TimedKernel> profile_kernels(const GpuProfile& p) {
  std::vector<TimedKernel> out;
  for (const GemmTiming& g : p.gemms) {
    const auto elem = static_cast<double>(math_element_bytes(g.math));
    const double bytes = static_cast<double>(g.m * g.k + g.k * g.n + g.m * g.n) * elem;
    out.push_back({product(g.math, g.m, g.n, g.k, bytes), g.seconds});
  }
  for (const ConvTiming& c : p.convs) {
    // An implicit GEMM: one row per output pixel, one column per output channel.
    const int64_t ho = (c.h + 2 * c.padding - c.kernel) / c.stride + 1;
    const int64_t wo = (c.w + 2 * c.padding - c.kernel) / c.stride + 1;
    const int64_t m = c.n * ho * wo;
    const int64_t k = c.c * c.kernel * c.kernel;
    const int64_t elem_bytes = math_element_bytes(c.math);
    const auto elem = static_cast<double>(elem_bytes);
    const double bytes =
        static_cast<double>(c.n * c.c * c.h * c.w + c.out_channels * k + m * c.out_channels) * elem;
    KernelCost kc = product(c.math, m, c.out_channels, k, bytes);
    if (cudnn_gathers_im2col(c.c, elem_bytes))
      kc.gathered_bytes = static_cast<double>(m * k) * elem;
    out.push_back({kc, c.seconds});
  }
  for (const CopyTiming& c : p.copies) {
    KernelCost kc;
    kc.bytes = static_cast<double>(c.bytes);
    out.push_back({kc, c.seconds});
  }
  return out;
}

double median_error(const std::vector<TimedKernel>& kernels, const GpuTiming& timing) {
  if (kernels.empty()) return 0;
  std::vector<double> errors;
  errors.reserve(kernels.size());
  for (const TimedKernel& k : kernels) {
    errors.push_back(std::abs(kernel_seconds(k.kernel, timing) / k.seconds - 1));
  }
  std::sort(errors.begin(), errors.end());
  const size_t mid = errors.size() / 2;
  return errors.size() % 2 == 1 ? errors[mid] : (errors[mid - 1] + errors[mid]) / 2;
}

Result<CalibratedTiming> fit_gpu_profile(const GpuProfile& p, const std::optional<GpuSpec>& gpu) {
  if (gpu && gpu->peaks.sm_count != p.sm_count) {
    return invalid_argument(
        fmt::format("{} was measured on {} ({} SMs), not on the {} ({} SMs)", p.source,
                    p.device_name, p.sm_count, gpu->name, gpu->peaks.sm_count),
        "give --gpu for the card it was measured on, or leave --gpu out");
  }
  const std::vector<TimedKernel> timed = profile_kernels(p);
  CalibratedTiming c;
  c.timing = gpu ? catalog_timing(*gpu) : measured_peaks(p);
  // The calibration times each kernel in an eager loop (calibrate.py's _timer): one the GPU
  // finishes before the host can issue the next times the host's loop, not the GPU, and fits
  // none of the GPU's rates (a product of 1,024 cubed in fp16 takes 18.5 us in the H100's
  // profile, its math under 3 at the catalog's rate).
  std::vector<TimedKernel> kernels;
  for (const TimedKernel& k : timed) {
    if (kernel_seconds(k.kernel, c.timing) >= p.host_op_s) kernels.push_back(k);
  }
  if (kernels.empty()) {
    return invalid_argument(
        fmt::format("{}: every timing is shorter than the host's {:.1f} us an op, so none "
                    "measures the GPU",
                    p.source, p.host_op_s * 1e6),
        "rerun `python3 -m trainfit.calibrate` on the machine with the GPU");
  }
  c.calibration.host_bound = static_cast<int>(timed.size() - kernels.size());
  if (gpu) c.calibration.catalog_median_error = median_error(kernels, c.timing);
  c.timing.kernel_overhead_s = p.empty_kernel_s;
  // The eager chains time an op (or node) with its one launch; the launch keeps its default.
  c.timing.python_op_s = std::max(0.0, p.host_op_s - c.timing.launch_s);
  c.timing.autograd_node_s = std::max(0.0, p.autograd_node_s - c.timing.launch_s);
  // The host's other work where the profile measured it; the catalog's constants elsewhere.
  const std::pair<const std::optional<double>*, double*> host[] = {
      {&p.view_s, &c.timing.view_s},
      {&p.grad_edge_s, &c.timing.grad_edge_s},
      {&p.param_loop_s, &c.timing.param_loop_s},
      {&p.mode_call_share, &c.timing.mode_call_share},
      {&p.module_call_share, &c.timing.module_call_share},
      {&p.sync_s, &c.timing.sync_s},
      {&p.cudnn_call_s, &c.timing.cudnn_call_s}};
  for (const auto& [measured, constant] : host) {
    if (*measured) *constant = **measured;
  }
  // Whether the card's products write their output after the math (Note [A product's
  // epilogue] in step_time.cc): the way that, fitted, times them better.
  GpuTiming flipped = c.timing;
  flipped.serial_epilogue = !flipped.serial_epilogue;
  fit_efficiencies(kernels, c.timing);
  fit_efficiencies(kernels, flipped);
  if (mean_log_error(kernels, flipped) < mean_log_error(kernels, c.timing)) c.timing = flipped;
  c.calibration.file = p.source;
  c.calibration.measured_on = p.device_name;
  c.calibration.kernels = static_cast<int>(kernels.size());
  c.calibration.median_error = median_error(kernels, c.timing);
  return c;
}

Status apply_gpu_profile(const GpuProfile& p, DeviceProfile& device) {
  std::optional<GpuSpec> gpu;
  if (!device.gpu.empty()) {
    TF_ASSIGN_OR_RETURN(GpuSpec found, find_gpu(device.gpu));
    gpu = found;
  }
  TF_ASSIGN_OR_RETURN(CalibratedTiming c, fit_gpu_profile(p, gpu));
  if (!gpu) {
    if (device.total_bytes < 0) device.total_bytes = p.total_bytes;
    device.sm = p.compute_capability;
    device.cublas_workspace_bytes = cublas_workspace_bytes(device.sm);
    device.gpu_display = p.device_name;
  }
  device.timing = c.timing;
  device.calibration = c.calibration;
  return {};
}

}  // namespace trainfit
