#include "graph/device_rules.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <optional>
#include <vector>

#include "base/size_math.h"

namespace trainfit {
namespace {

bool cuda(const KernelTarget& target) {
  return target.device == Device::kCuda;
}

}  // namespace

int64_t cublas_workspace_bytes(int sm) {
  constexpr int64_t kKiB = 1024;
  constexpr int64_t kMiB = 1024 * kKiB;
  if (sm >= 90) return 32 * kMiB;
  return 4096 * kKiB * 2 + 16 * kKiB * 8;
}

bool aten_op_uses_cublas(std::string_view aten_name) {
  // aten names after decomposition.
  static constexpr std::string_view kGemms[] = {
      "aten::mm",     "aten::addmm",  "aten::bmm",   "aten::baddbmm", "aten::addbmm",
      "aten::matmul", "aten::linear", "aten::addmv", "aten::mv",      "aten::_addmm_activation"};
  for (std::string_view g : kGemms) {
    if (g == aten_name) return true;
  }
  return false;
}

bool CublasHandles::creates_handle(const KernelTarget& target, bool autograd_thread) {
  if (!cuda(target)) return false;
  bool& made = autograd_thread ? backward_ : forward_;
  const bool first = !made;
  made = true;
  return first;
}

int64_t cublaslt_workspace_bytes() {
  return int64_t{1024} * 1024;
}

namespace {

// One recorded call (cudnn_measured.inc): kind, itemsize, N, C, K, groups, H, W, kernel,
// stride, padding and dilation (h, w each; a 1-D convolution as H = 1), then its bytes.
using MeasuredKey = std::array<int64_t, 16>;
struct MeasuredWorkspace {
  MeasuredKey key;
  int64_t bytes;
};
constexpr MeasuredWorkspace kMeasured[] = {
#include "graph/cudnn_measured.inc"
};

struct MeasuredSearch {
  MeasuredKey key;
  int64_t trial;
  int64_t chosen;
};
constexpr MeasuredSearch kMeasuredSearches[] = {
#include "graph/cudnn_benchmark_measured.inc"
};

// The table key of a problem and direction; nullopt where no table can hold it (3-D, NHWC).
std::optional<MeasuredKey> measured_key(const ConvProblem& conv, int kind) {
  const size_t spatial = conv.in_spatial.size();
  if (spatial < 1 || spatial > 2 || conv.memory_format != MemoryFormat::kChannelsFirst) {
    return std::nullopt;
  }
  const auto two = [spatial](const Dims& d, int64_t missing) {
    return spatial == 2 ? std::array<int64_t, 2>{d[0], d[1]}
                        : std::array<int64_t, 2>{missing, d[0]};
  };
  const auto hw = two(conv.in_spatial, 1);
  const auto k = two(conv.kernel, 1);
  const auto s = two(conv.stride, 1);
  const auto p = two(conv.padding, 0);
  const auto d = two(conv.dilation, 1);
  return MeasuredKey{kind,
                     conv.itemsize,
                     conv.batch,
                     conv.in_channels,
                     conv.out_channels,
                     conv.groups,
                     hw[0],
                     hw[1],
                     k[0],
                     k[1],
                     s[0],
                     s[1],
                     p[0],
                     p[1],
                     d[0],
                     d[1]};
}

// The entry of `table` (sorted by key) for the problem, if any.
template <typename Entry, size_t N>
const Entry* find_measured(const Entry (&table)[N], const ConvProblem& conv, int kind) {
  const std::optional<MeasuredKey> key = measured_key(conv, kind);
  if (!key) return nullptr;
  const Entry* end = std::end(table);
  const Entry* it = std::lower_bound(
      std::begin(table), end, *key, [](const Entry& m, const MeasuredKey& k) { return m.key < k; });
  return it != end && it->key == *key ? it : nullptr;
}

constexpr size_t kBatchField = 2;  // of a MeasuredKey

MeasuredKey without_batch(MeasuredKey k) {
  k[kBatchField] = 0;
  return k;
}

// kMeasured ordered by the problem without its batch, then by the batch: one problem's
// recordings at every batch are neighbours. Built on first use.
const std::vector<const MeasuredWorkspace*>& measured_by_problem() {
  static const std::vector<const MeasuredWorkspace*> kIndex = [] {
    std::vector<const MeasuredWorkspace*> index;
    for (const MeasuredWorkspace& m : kMeasured) index.push_back(&m);
    std::sort(index.begin(), index.end(),
              [](const MeasuredWorkspace* a, const MeasuredWorkspace* b) {
                const MeasuredKey ka = without_batch(a->key);
                const MeasuredKey kb = without_batch(b->key);
                return ka != kb ? ka < kb : a->key[kBatchField] < b->key[kBatchField];
              });
    return index;
  }();
  return kIndex;
}

// The problem recorded at another batch (Note [cuDNN convolution workspaces]): from the largest
// recorded batch under `conv`'s, its recording scaled up by the batch ratio; else from the
// smallest above, the rule's bytes held between that recording scaled down and the recording
// itself, since the workspace grows with the batch, never faster.
std::optional<int64_t> scaled_from_another_batch(const ConvProblem& conv, int kind,
                                                 int64_t rule_bytes) {
  const std::optional<MeasuredKey> key = measured_key(conv, kind);
  if (!key) return std::nullopt;
  const MeasuredKey problem = without_batch(*key);
  const std::vector<const MeasuredWorkspace*>& index = measured_by_problem();
  // Compares an index entry's problem with a problem, either way round.
  struct ByProblem {
    bool operator()(const MeasuredWorkspace* m, const MeasuredKey& k) const {
      return without_batch(m->key) < k;
    }
    bool operator()(const MeasuredKey& k, const MeasuredWorkspace* m) const {
      return k < without_batch(m->key);
    }
  };
  const auto [first, last] = std::equal_range(index.begin(), index.end(), problem, ByProblem{});
  // The range is in batch order: the last recording below the batch, the first above it.
  const MeasuredWorkspace* below = nullptr;
  const MeasuredWorkspace* above = nullptr;
  for (auto it = first; it != last; ++it) {
    const int64_t b = (*it)->key[kBatchField];
    if (b < conv.batch) below = *it;
    if (b > conv.batch && !above) above = *it;
  }
  const MeasuredWorkspace* from = below ? below : above;
  if (!from) return std::nullopt;
  const auto scaled =
      static_cast<int64_t>(static_cast<double>(from->bytes) * static_cast<double>(conv.batch) /
                           static_cast<double>(from->key[kBatchField]));
  if (below) return scaled;
  return std::clamp(rule_bytes, scaled, from->bytes);
}

}  // namespace

ConvWorkspaces cudnn_conv_workspaces(const ConvProblem& conv, int sm) {
  ConvWorkspaces ws = cudnn_conv_rule(conv);
  int64_t* const directions[] = {&ws.forward, &ws.backward_data, &ws.backward_filter};
  for (int kind = 0; kind < 3 && sm == 90; ++kind) {
    // The recordings ran fp16 autocast: a bf16 problem borrows them (cuDNN's bf16 engines
    // are others, so the figure is not measured).
    const bool borrowed = conv.dtype == DType::kBFloat16;
    if (const MeasuredWorkspace* m = find_measured(kMeasured, conv, kind)) {
      *directions[kind] = m->bytes;
      ws.source[static_cast<size_t>(kind)] =
          borrowed ? FigureSource::kScaled : FigureSource::kMeasured;
      if (!borrowed) ++ws.measured;
    } else if (const std::optional<int64_t> scaled =
                   scaled_from_another_batch(conv, kind, *directions[kind])) {
      *directions[kind] = *scaled;
      ws.source[static_cast<size_t>(kind)] = FigureSource::kScaled;
    }
  }
  for (int kind = 0; kind < 3; ++kind) {
    const auto k = static_cast<size_t>(kind);
    ws.bound[k] = is_unmeasured(ws.source[k])
                      ? std::max(*directions[kind], cudnn_conv_bound(conv, kind))
                      : *directions[kind];
  }
  return ws;
}

namespace {

// Note [Workspace bounds]: how a problem is sized and grouped for its bound.
enum class ConvClass : uint8_t { kGemm, kOneByOne, kLarger };
struct BoundShape {
  ConvClass cls = ConvClass::kLarger;
  int64_t size = 0;              // S: X + Y + W, and backward-filter's per-image fp32 partials
  bool recorded_family = false;  // dense, undilated, NCHW, 1-D or 2-D, fp32 or fp16
};
constexpr double kBoundMargin = 1.25;
constexpr int64_t kBoundSlack = 1024;
constexpr int64_t kMaxImageSlices = 64;  // cudnn_conv_rule's per-image partials

std::optional<BoundShape> bound_shape(const ConvProblem& conv, int direction) {
  const auto all_equal = [](const Dims& d, int64_t v) {
    return std::all_of(d.begin(), d.end(), [v](int64_t x) { return x == v; });
  };
  const std::optional<int64_t> in_plane = checked_numel(conv.in_spatial);
  const std::optional<int64_t> out_plane = checked_numel(conv.out_spatial);
  const std::optional<int64_t> taps = checked_numel(conv.kernel);
  if (!in_plane || !out_plane || !taps || conv.groups < 1) return std::nullopt;
  const int64_t in_per_group = conv.in_channels / conv.groups;
  const double weight = static_cast<double>(conv.out_channels) * static_cast<double>(in_per_group) *
                        static_cast<double>(*taps);
  const auto item = static_cast<double>(conv.itemsize);
  double size = static_cast<double>(conv.batch) * static_cast<double>(conv.in_channels) *
                    static_cast<double>(*in_plane) * item +
                static_cast<double>(conv.batch) * static_cast<double>(conv.out_channels) *
                    static_cast<double>(*out_plane) * item +
                weight * item;
  if (direction == 2) {
    size += static_cast<double>(std::min(conv.batch, kMaxImageSlices)) * weight * 4;
  }
  if (size > static_cast<double>(int64_t{1} << 60)) return std::nullopt;
  BoundShape b;
  b.size = static_cast<int64_t>(size);
  const bool one_by_one = all_equal(conv.kernel, 1);
  const bool pointwise = one_by_one && all_equal(conv.stride, 1) && all_equal(conv.padding, 0) &&
                         all_equal(conv.dilation, 1) && conv.groups == 1;
  b.cls = pointwise && (*out_plane * conv.itemsize) % 16 == 0 ? ConvClass::kGemm
          : one_by_one                                        ? ConvClass::kOneByOne
                                                              : ConvClass::kLarger;
  const size_t spatial = conv.in_spatial.size();
  b.recorded_family = conv.groups == 1 && all_equal(conv.dilation, 1) && spatial >= 1 &&
                      spatial <= 2 && conv.memory_format == MemoryFormat::kChannelsFirst &&
                      (conv.dtype == DType::kFloat32 || conv.dtype == DType::kFloat16);
  return b;
}

// The largest recorded workspace over S per family (direction x class x 1-D/2-D x itemsize)
// and per direction over all of them, from cudnn_measured.inc; computed on first use.
struct BoundRatios {
  static constexpr size_t kFamilies = size_t{3} * 3 * 2 * 2;
  std::array<double, kFamilies> family{};
  std::array<bool, kFamilies> seen{};
  std::array<double, 3> direction{};
  static size_t index(int direction, ConvClass cls, size_t spatial, int64_t itemsize) {
    const size_t dtype = itemsize == 2 ? 1 : 0;
    return ((static_cast<size_t>(direction) * 3 + static_cast<size_t>(cls)) * 2 + (spatial - 1)) *
               2 +
           dtype;
  }
};

const BoundRatios& bound_ratios() {
  static const BoundRatios kRatios = [] {
    BoundRatios r;
    for (const MeasuredWorkspace& m : kMeasured) {
      // kind, itemsize, N, C, K, groups, H, W, kernel, stride, padding, dilation (h, w each).
      const MeasuredKey& k = m.key;
      const int kind = static_cast<int>(k[0]);
      ConvProblem p;
      p.itemsize = k[1];
      p.dtype = k[1] == 2 ? DType::kFloat16 : DType::kFloat32;
      p.batch = k[2];
      p.in_channels = k[3];
      p.out_channels = k[4];
      p.groups = k[5];
      const bool one_d = k[6] == 1 && k[8] == 1 && k[10] == 1 && k[12] == 0;
      const auto out = [&](size_t i) {
        return (k[6 + i] + 2 * k[12 + i] - k[14 + i] * (k[8 + i] - 1) - 1) / k[10 + i] + 1;
      };
      const auto dims = [one_d](int64_t h, int64_t w) { return one_d ? Dims{w} : Dims{h, w}; };
      p.in_spatial = dims(k[6], k[7]);
      p.out_spatial = dims(out(0), out(1));
      p.kernel = dims(k[8], k[9]);
      p.stride = dims(k[10], k[11]);
      p.padding = dims(k[12], k[13]);
      p.dilation = dims(k[14], k[15]);
      const std::optional<BoundShape> b = bound_shape(p, kind);
      if (!b || b->size <= 0) continue;
      const double ratio = static_cast<double>(m.bytes) / static_cast<double>(b->size);
      const size_t i = BoundRatios::index(kind, b->cls, p.in_spatial.size(), p.itemsize);
      r.family[i] = std::max(r.family[i], ratio);
      r.seen[i] = true;
      r.direction[static_cast<size_t>(kind)] =
          std::max(r.direction[static_cast<size_t>(kind)], ratio);
    }
    return r;
  }();
  return kRatios;
}

}  // namespace

int64_t cudnn_conv_bound(const ConvProblem& conv, int direction) {
  const int64_t central = cudnn_conv_rule(conv).bytes(direction);
  const std::optional<BoundShape> b = bound_shape(conv, direction);
  if (!b || direction < 0 || direction > 2) return central;
  const BoundRatios& r = bound_ratios();
  double ratio = r.direction[static_cast<size_t>(direction)];
  if (b->recorded_family) {
    const size_t i = BoundRatios::index(direction, b->cls, conv.in_spatial.size(), conv.itemsize);
    if (r.seen[i]) ratio = r.family[i];
  }
  const auto scaled =
      static_cast<int64_t>(std::ceil(ratio * kBoundMargin * static_cast<double>(b->size)));
  return std::max(central, scaled) + kBoundSlack;
}

ConvPlanSearch cudnn_benchmark_search(const ConvProblem& conv, int direction, int sm) {
  if (sm == 90) {
    if (const MeasuredSearch* m = find_measured(kMeasuredSearches, conv, direction)) {
      return {m->trial, m->chosen, true};
    }
  }
  const ConvWorkspaces ws = cudnn_conv_workspaces(conv, sm);
  const int64_t heuristic = direction == 0   ? ws.forward
                            : direction == 1 ? ws.backward_data
                                             : ws.backward_filter;
  return {heuristic, heuristic, false};
}

uint64_t cudnn_problem_key(const ConvProblem& conv, int direction) {
  // FNV-1a over every field that tells problems apart.
  uint64_t h = 14695981039346656037ULL;
  const auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xFF;
      h *= 1099511628211ULL;
    }
  };
  for (int64_t v : {int64_t{direction}, conv.batch, conv.in_channels, conv.out_channels,
                    conv.groups, conv.itemsize, static_cast<int64_t>(conv.memory_format)}) {
    mix(v);
  }
  for (const Dims* d : {&conv.in_spatial, &conv.out_spatial, &conv.kernel, &conv.stride,
                        &conv.padding, &conv.dilation}) {
    mix(static_cast<int64_t>(d->size()));
    for (int64_t v : *d) mix(v);
  }
  return h;
}

bool cudnn_gathers_im2col(int64_t channels_per_group, int64_t element_bytes) {
  return (channels_per_group * element_bytes) % 16 != 0;
}

ConvWorkspaces cudnn_conv_rule(const ConvProblem& conv) {
  constexpr int64_t kAlignment = 16;   // the converted tensors' padding
  constexpr int64_t kPlaneAlign = 16;  // a GEMM on NCHW planes wants 16-byte rows
  constexpr int64_t kSplitKCap = int64_t{9} * 1024 * 1024;
  constexpr int64_t kSplitKSlices = 14;
  const auto all_equal = [](const Dims& d, int64_t v) {
    return std::all_of(d.begin(), d.end(), [v](int64_t x) { return x == v; });
  };
  // Every size in checked arithmetic: a problem too big to count takes no workspace (the
  // tensors' own sizes are refused elsewhere).
  const auto product = [](std::initializer_list<int64_t> factors) -> std::optional<int64_t> {
    int64_t p = 1;
    for (int64_t f : factors) {
      const std::optional<int64_t> next = checked_mul(p, f);
      if (!next || *next > (int64_t{1} << 60)) return std::nullopt;
      p = *next;
    }
    return p;
  };
  const std::optional<int64_t> in_plane = checked_numel(conv.in_spatial);
  const std::optional<int64_t> out_plane = checked_numel(conv.out_spatial);
  const std::optional<int64_t> taps = checked_numel(conv.kernel);
  if (!in_plane || !out_plane || !taps || conv.groups < 1) return {};
  const std::optional<int64_t> weight_elements =
      product({conv.out_channels, conv.in_channels / conv.groups, *taps});
  const std::optional<int64_t> x_bytes =
      product({conv.batch, conv.in_channels, *in_plane, conv.itemsize});
  const std::optional<int64_t> y_bytes =
      product({conv.batch, conv.out_channels, *out_plane, conv.itemsize});
  if (!weight_elements || !x_bytes || !y_bytes) return {};
  // A GEMM's weight gradient sums per-image fp32 partials: one slice per image, kMaxImageSlices
  // the most seen (resnet50 at batch 64).
  const std::optional<int64_t> per_image =
      product({std::min(conv.batch, kMaxImageSlices), *weight_elements, 4});
  if (!per_image) return {};
  const int64_t x = *x_bytes;
  const int64_t y = *y_bytes;
  const int64_t w = *weight_elements * conv.itemsize;
  const int64_t fp32_weight = *weight_elements * 4;
  const bool one_by_one = all_equal(conv.kernel, 1);
  const bool pointwise = one_by_one && all_equal(conv.stride, 1) && all_equal(conv.padding, 0) &&
                         all_equal(conv.dilation, 1) && conv.groups == 1;
  const int64_t split_k = std::min(kSplitKSlices * std::min(fp32_weight, kSplitKCap), kSplitKCap);
  ConvWorkspaces ws;
  if (conv.memory_format == MemoryFormat::kChannelsLast) {
    ws.backward_filter = pointwise ? *per_image : split_k;
    return ws;
  }
  if (pointwise && (*out_plane * conv.itemsize) % kPlaneAlign == 0) {
    ws.backward_filter = *per_image;
    return ws;
  }
  const int64_t converted = one_by_one ? x + y + kAlignment : x + y + w + kAlignment;
  ws.forward = converted;
  ws.backward_data = converted;
  ws.backward_filter = one_by_one ? converted : converted + split_k;
  return ws;
}

bool CublasHandles::creates_lt_handle(const KernelTarget& target) {
  if (!cuda(target)) return false;
  const bool first = !lt_;
  lt_ = true;
  return first;
}

namespace {

int64_t div_up(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// floor(log2(n)) as a power of two, at least 1 (Reduce.cuh last_pow2).
int64_t last_pow2(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

int max_threads_per_sm(int sm) {
  if (sm == 86 || sm == 89) return 1536;
  if (sm == 75) return 1024;
  return 2048;
}

}  // namespace

// Reduce.cuh's setReduceConfig and ReduceConfig's global_memory_size and semaphore_size, for a
// reduction whose reduced values are one run of `inputs_per_output` per output.
ReduceScratch cuda_reduce_scratch(const ReduceProblem& r) {
  constexpr int64_t kMaxThreads = 512;
  constexpr int64_t kWarp = 32;
  constexpr int64_t kVectorWidth = 4;  // vt0, and the widest output vector
  constexpr int64_t kMinValuesPerThread = 16;
  constexpr int64_t kMaxValuesPerThread = 256;
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  if (r.outputs < 1 || r.inputs_per_output < 1 || r.sm_count < 1 || r.outputs > kMaxCount ||
      r.inputs_per_output > kMaxCount) {
    return {};
  }
  const bool inner = r.contiguous_inputs;
  int64_t dim0 = inner ? r.inputs_per_output : r.outputs;
  const int64_t dim1 = inner ? r.outputs : r.inputs_per_output;
  int64_t output_vec = 1;
  if (inner && dim0 > 128) {
    dim0 /= kVectorWidth;  // vectorized loads along the reduced run
  } else if (!inner) {
    output_vec = kVectorWidth;
    while (r.outputs % output_vec != 0) output_vec /= 2;
    dim0 /= output_vec;
  }
  const int64_t max_threads = kMaxThreads / output_vec;
  const int64_t dim0_pow2 = dim0 < max_threads ? last_pow2(dim0) : max_threads;
  const int64_t dim1_pow2 = dim1 < max_threads ? last_pow2(dim1) : max_threads;
  int64_t width = std::min(dim0_pow2, kWarp);
  const int64_t height = std::min(dim1_pow2, max_threads / width);
  width = std::min(dim0_pow2, max_threads / height);
  int64_t step_input = 1;
  int64_t step_output = 1;
  (inner ? step_input : step_output) *= width;
  const auto values_per_thread = [&] { return div_up(r.inputs_per_output, step_input); };
  const bool split_warps =
      values_per_thread() >= std::min(height * kMinValuesPerThread, kMaxValuesPerThread);
  (split_warps ? step_input : step_output) *= height;
  const int64_t target_grid = int64_t{r.sm_count} * (max_threads_per_sm(r.sm) / (width * height));
  const int64_t grid_x = div_up(r.outputs / output_vec, step_output);
  if (!split_warps || values_per_thread() < kMaxValuesPerThread || grid_x > target_grid) return {};
  const int64_t ctas = std::max(
      std::min(div_up(target_grid, grid_x), div_up(values_per_thread(), kMinValuesPerThread)),
      div_up(values_per_thread(), kMaxValuesPerThread));
  if (ctas <= 1) return {};
  ReduceScratch s;
  const std::optional<int64_t> per_output = checked_mul(r.acc_itemsize, ctas);
  const std::optional<int64_t> staged =
      per_output ? checked_mul(*per_output, r.outputs) : std::nullopt;
  const std::optional<int64_t> buffer =
      staged ? checked_mul(*staged, inner ? 1 : width * output_vec) : std::nullopt;
  if (!buffer) return {};
  s.buffer = *buffer;
  s.semaphores = 4 * grid_x;
  return s;
}

bool keeps_dropout_mask(const KernelTarget& target, bool inplace, double p, int64_t elements) {
  return cuda(target) && !inplace && p > 0 && p < 1 && elements > 0;
}

int64_t dropout_kept_bytes(const KernelTarget& target, int64_t noise_bytes, int64_t itemsize) {
  if (!cuda(target) || itemsize <= 0) return noise_bytes;
  return noise_bytes / itemsize * dtype_bytes(DType::kBool);
}

bool adds_gradient_in_place(const KernelTarget& target, bool only_reference) {
  return target.torch == TorchVersion::k2 && only_reference;
}

bool host_tensors_use_device_memory(const KernelTarget& target) {
  return !cuda(target);
}

// What cuDNN's attention plans asked for beyond the frontend's tensors, forward and backward, in
// every recording (validation/gpu_results/NVIDIA_H100_80GB_HBM3/snapshots.tar.xz, F_*).
constexpr int64_t kCudnnAttentionPlanBytes = 256;

SdpaBackend cuda_sdpa_backend(const SdpaProblem& p) {
  const bool low = p.dtype == DType::kFloat16 || p.dtype == DType::kBFloat16;
  const int major = p.sm / 10;
  const bool cudnn_first = major == 9 || major == 10;
  const int64_t value_dim = p.value_dim > 0 ? p.value_dim : p.head_dim;
  if (cudnn_first && low && p.head_dim % 8 == 0 && value_dim % 8 == 0 && p.head_dim <= 128 &&
      value_dim <= 128 && p.keys != 1 && p.dropout * 16 == std::floor(p.dropout * 16)) {
    return SdpaBackend::kCudnn;
  }
  if (low && !p.mask && p.head_dim <= 256 && p.head_dim % 8 == 0) return SdpaBackend::kFlash;
  if (p.head_dim % 4 == 0 && !p.grouped_heads) return SdpaBackend::kEfficient;
  return SdpaBackend::kMath;
}

int64_t efficient_attention_workspace(const FusedAttentionShape& a) {
  const bool half = a.dtype != DType::kFloat32;
  // The first kernel of cutlassB.h's sm80 list whose head dim fits: block sizes I x J and the
  // widest head dim it takes.
  const int64_t widest = std::max(a.head_dim, a.value_dim);
  int64_t block_i = 64;
  int64_t block_j = 64;
  int64_t max_k = 64;
  if (widest <= 32) {
    max_k = 32;
  } else if (widest <= 64) {
    max_k = 64;
  } else if (half && widest <= 96 && (a.sm == 86 || a.sm == 89)) {
    block_i = 128;
    max_k = 96;
  } else if (widest <= 128) {
    block_i = 128;
    block_j = half ? 128 : 64;
    max_k = 128;
  } else {
    block_i = 128;
    max_k = 65536;
  }
  const bool accum_q = a.sm >= 70 || half;        // kEnableSplitKeys, or an fp32 accumulator
  const bool accum_kv = half && max_k > block_i;  // !kOutputInRF
  int64_t splits = 1;
  if (accum_kv) {
    splits = ceil_div(a.keys, block_j);
    if (a.rows >= 256 && a.keys <= 2 * block_j) splits = 1;
    splits = std::max<int64_t>(1, std::min<int64_t>(splits, 200 / std::max<int64_t>(a.rows, 1)));
  }
  constexpr int64_t kLockFloats = 4;  // GradQTempStorage's lock, counter and padding
  const int64_t dq = accum_q ? ceil_div(a.queries, block_i) * ceil_div(a.head_dim, block_j) *
                                   (kLockFloats + block_i * block_j)
                             : 0;
  const auto dkv = [&](int64_t dim) {
    return accum_kv ? splits * block_j * ceil_div(dim, block_i) * block_i : 0;
  };
  const int64_t per_row = ceil_div(dq + dkv(a.head_dim) + dkv(a.value_dim), 4) * 4;
  return a.rows * per_row * 4;
}

FusedAttentionBytes fused_attention_bytes(SdpaBackend backend, const FusedAttentionShape& a) {
  FusedAttentionBytes b;
  const int64_t rows = a.rows;
  const int64_t queries = a.queries;
  if (backend == SdpaBackend::kFlash) {
    const int64_t padded = ceil_div(queries, 128) * 128;
    b.logsumexp = 4 * rows * queries;
    b.backward_workspace = 4 * rows * padded + 4 * rows * padded * a.head_dim;
  } else if (backend == SdpaBackend::kEfficient) {
    b.logsumexp = 4 * rows * ceil_div(queries, 32) * 32;
    if (a.dtype != DType::kFloat32 && a.value_dim > 64) {
      b.forward_workspace = 4 * rows * queries * a.value_dim;
    }
    // Note [Memory-efficient attention's backward].
    std::vector<MemoryStep>& steps = b.backward_steps;
    int allocs = 0;
    const auto alloc = [&](int64_t bytes) {
      steps.push_back({MemoryStep::Kind::kAlloc, bytes});
      return allocs++;
    };
    const auto free_step = [&](int step) { steps.push_back({MemoryStep::Kind::kFree, step}); };
    const int64_t delta_bytes = 4 * rows * queries;
    int delta = 0;
    if (a.dtype == DType::kFloat32) {
      const int product = alloc(4 * rows * queries * a.value_dim);  // grad_out * out
      const int sum = alloc(delta_bytes);
      delta = alloc(delta_bytes);
      free_step(sum);
      free_step(product);
    } else {
      delta = alloc(delta_bytes);
    }
    const int64_t workspace_bytes = efficient_attention_workspace(a);
    const int workspace = workspace_bytes > 0 ? alloc(workspace_bytes) : -1;
    free_step(delta);
    if (workspace >= 0) free_step(workspace);
  } else if (backend == SdpaBackend::kCudnn) {
    // The H100's recordings of Qwen2.5-0.5B and Llama-3.2-1B (PyTorch 2.11, cuDNN 9.19): 256
    // bytes forward, and the frontend's scratch plus 256 backward, one block per call.
    b.logsumexp = 4 * rows * queries;
    b.forward_workspace = kCudnnAttentionPlanBytes;
    b.backward_workspace =
        4 * rows * queries + 4 * rows * queries * a.head_dim + kCudnnAttentionPlanBytes;
  }
  return b;
}

bool kernels_take_workspaces(const KernelTarget& target) {
  return cuda(target);
}

bool softmax_backward_takes_product(const KernelTarget& target) {
  return cuda(target);
}

bool uses_grad_scaler(const KernelTarget& target, Precision precision) {
  return cuda(target) && precision == Precision::kAmpFp16;
}

bool recompute_stops_early(const KernelTarget& target) {
  return target.torch == TorchVersion::k2;
}

}  // namespace trainfit
