// A recorded trace: the allocations and frees of a real PyTorch training step, op by op, at
// two or more batch sizes, as `python3 -m trainfit.trace` writes it (docs/trace-format.md).
//
//   Result<Trace> t = parse_trace(text, "mobilenet.trace.json");   // the file's text
//   t->runs[0].batch == 1; t->runs[0].events[5].bytes ...
//
// Parsing checks everything later stages rely on (known phases and categories, ids allocated
// once and freed once, parameter indices in range) so that a malformed or truncated file is one
// clear error, never a crash.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "base/id_vector.h"
#include "base/status.h"
#include "graph/shape.h"
#include "lower/events.h"
#include "lower/training.h"

namespace trainfit {

inline constexpr std::string_view kTraceFormat = "trainfit-trace";
inline constexpr int kTraceVersion = 1;

struct TraceParam {
  std::string name;
  int64_t bytes = 0;
  int64_t itemsize = 0;  // bytes per element of its dtype; 0 when the dtype is unknown
  bool buffer = false;
  bool trainable = false;
};

struct TraceGroup {
  std::vector<int32_t> params;  // indices into Trace::params
  double weight_decay = -1;     // -1: not recorded
};

struct TraceOptimizer {
  std::string type;                   // the Python class: "AdamW"
  std::optional<OptimizerKind> kind;  // when trainfit models it
  OptimizerImpl impl = OptimizerImpl::kLoop;
  std::vector<TraceGroup> groups;
};

// Which output of a convolution op an allocation is: the kernel that fills it takes cuDNN's
// workspace on CUDA (device_rules.h, Note [cuDNN convolution workspaces]).
enum class ConvRole : uint8_t { kAbsent, kOutput, kGradInput, kGradWeight, kGradBias };
inline constexpr auto kConvRoleNames = enum_names<ConvRole>({
    {ConvRole::kOutput, "output"},
    {ConvRole::kGradInput, "grad_input"},
    {ConvRole::kGradWeight, "grad_weight"},
    {ConvRole::kGradBias, "grad_bias"},
});

// The convolution an allocation came from, as the run saw it (the op's input, weight and
// output shapes at the run's batch, and its geometry; transposed: conv_transpose's own).
struct TraceConv {
  Dims input, weight, output;
  Dims stride, padding, dilation;
  int64_t groups = 1;
  bool transposed = false;
  bool channels_last = false;  // the input in channels_last memory format
};

// What an allocation is in an attention core that PyTorch 1.13 ran op by op and 2.x runs on CUDA
// as one fused kernel (device_rules.h, Note [Fused attention]): the core's output, or the
// gradient of its q, k or v.
enum class AttentionRole : uint8_t { kAbsent, kOutput, kGradQ, kGradK, kGradV };
inline constexpr auto kAttentionRoleNames = enum_names<AttentionRole>({
    {AttentionRole::kOutput, "output"},
    {AttentionRole::kGradQ, "grad_q"},
    {AttentionRole::kGradK, "grad_k"},
    {AttentionRole::kGradV, "grad_v"},
});

// An attention core the tracer marked (nn.MultiheadAttention with need_weights=False): where
// it began, what it read, the shapes of q, k and v as (batch x heads, length, head dim) at the
// run's batch, and where its backward began.
struct TraceAttention {
  int32_t first = -1;              // the buffer of its first allocation (q scaled)
  int32_t q = -1, k = -1, v = -1;  // the buffers it read
  Dims q_shape, k_shape, v_shape;
  bool mask = false;
  int32_t backward_from = -1;  // the event its backward starts at; -1 when backward never came
};

// A sum over some dimensions of its input, as the run saw it: on CUDA it may stage partial
// sums (device_rules.h, Note [Reductions' staging]).
struct TraceReduce {
  Dims input;              // the input's shape at the run's batch
  Dims dims;               // the dimensions summed, ascending
  bool contiguous = true;  // the input is contiguous
};

struct TraceEvent {
  bool alloc = true;
  int32_t buffer = 0;  // dense index of the allocation within its run, in order of allocation
  int64_t bytes = 0;   // allocations only
  Category category = Category::kTemporary;
  Phase phase = Phase::kSetup;
  uint8_t iteration = 0;
  int32_t op = -1;             // into Trace::ops
  int32_t module = -1;         // into Trace::modules
  int32_t param = -1;          // into Trace::params, for parameter allocations
  int32_t dtype = -1;          // into Trace::dtypes
  bool dropout_noise = false;  // CPU dropout's noise tensor (CUDA keeps a bool mask instead)
  // PyTorch 1.x's old + new of two gradients in autograd's input buffer: the buffer of the old
  // one, which 2.x adds into instead when nothing else holds it. -1 otherwise.
  int32_t sums = -1;
  ConvRole conv_role = ConvRole::kAbsent;
  int32_t conv = -1;  // into TraceRun::convs, with conv_role
  AttentionRole attention_role = AttentionRole::kAbsent;
  int32_t attention = -1;  // into TraceRun::attentions, with attention_role
  int32_t reduce = -1;     // into TraceRun::reduces: the sum that made it
};

// The shape of the first tensor a module's first call returned in a run's first iteration.
struct TraceOutput {
  std::string path;
  Dims shape;
};

struct TraceRun {
  int64_t batch = 0;
  int iterations = 0;
  int32_t allocations = 0;
  IdVector<TraceEvent> events;
  std::vector<TraceConv> convs;
  std::vector<TraceAttention> attentions;
  std::vector<TraceReduce> reduces;
  std::vector<TraceOutput> outputs;  // optional in the file: empty when not recorded
};

// A module of the traced model, in named_modules() order; "" is the model itself.
struct TraceModuleInfo {
  std::string path;
  std::string type;  // the Python class: "Conv2d"
};

// The autocast a trace's forward and loss ran under (`python3 -m trainfit.trace --autocast`):
// the dtype it lowered to, and whose op lists chose the casts, CUDA's (trainfit.autocast's
// emulation on the CPU) or the CPU's own.
struct TraceAutocast {
  std::string dtype;  // "bfloat16" or "float16"
  Device lists = Device::kCuda;
};

struct Trace {
  std::string model;
  std::string torch;
  std::optional<TraceAutocast> autocast;  // nullopt: the step ran in fp32
  TraceOptimizer optimizer;
  IdVector<TraceParam> params;
  IdVector<std::string> ops;                 // interned op names
  IdVector<std::string> modules;             // interned module paths
  IdVector<std::string> dtypes;              // interned dtype names
  std::vector<TraceRun> runs;                // sorted by batch
  std::vector<TraceModuleInfo> module_info;  // optional in the file: empty when not recorded
};

// Bytes per element of a PyTorch dtype name ("float32" -> 4); 0 when unknown.
int64_t dtype_itemsize(std::string_view name);

// `source` names the input in errors (a path).
Result<Trace> parse_trace(std::string_view text, std::string_view source);

}  // namespace trainfit
