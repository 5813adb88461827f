// The graph of one training forward pass: tensor values, the storages they live in, the ops
// that made them, and the modules (state_dict paths) the ops ran in.
//
//   Graph g = *build_model(...);
//   for (const Node& n : g.nodes) { ... n.op->name, g.modules[n.module].path, n.saved ... }
//   activation_bytes(g)   // see activations.h
//
// Values are SSA: an in-place op makes a new Value that aliases its input's storage, as a view
// does. Storage is what memory is made of; several values may share one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "base/id_vector.h"
#include "base/size_math.h"
#include "graph/attrs.h"
#include "graph/dtype.h"
#include "graph/shape.h"

namespace trainfit {

struct OpSchema;

using ValueId = int32_t;
using NodeId = int32_t;
using StorageId = int32_t;
using ModuleId = int32_t;
inline constexpr int32_t kNone = -1;

// Which kernels and which Python-side decompositions the graph follows.
enum class Device : uint8_t { kCpu, kCuda };
enum class TorchVersion : uint8_t {
  k1_13,  // the PyTorch Debian ships, which the validation harness runs on CPU
  k2,     // PyTorch 2.x, as CUDA training runs it
};
// The names --device-profile takes: cuda is PyTorch 2.x on CUDA, cpu is PyTorch 1.13 on CPU.
inline constexpr auto kDeviceNames =
    enum_names<Device>({{Device::kCuda, "cuda"}, {Device::kCpu, "cpu"}});
struct KernelTarget {
  Device device = Device::kCuda;
  TorchVersion torch = TorchVersion::k2;
  int sm = 0;        // CUDA: the GPU's compute capability x 10 (90: Hopper); 0 on the CPU
  int sm_count = 0;  // CUDA: its streaming multiprocessors (kernels size their grids by them)
  bool operator==(const KernelTarget&) const = default;
};

// Where a size the memory model uses comes from (device_rules.h, Note [Workspace bounds]).
enum class FigureSource : uint8_t {
  kDerived,   // from the library's source: a tensor's bytes, cuBLAS's workspace; exact
  kMeasured,  // a workspace this GPU's recordings measured for this very problem
  kScaled,    // a recording of a neighbouring problem: another batch, fp16's for bf16
  kRule,      // a rule fitted to the recordings: every problem on a GPU without recordings
};
inline constexpr int kFigureSourceCount = 4;
inline constexpr auto kFigureSourceNames = enum_names<FigureSource>({
    {FigureSource::kDerived, "derived"},
    {FigureSource::kMeasured, "measured"},
    {FigureSource::kScaled, "scaled"},
    {FigureSource::kRule, "rule"},
});
// Not measured for this problem on this GPU: its figure is a central estimate with a bound.
inline bool is_unmeasured(FigureSource s) {
  return s == FigureSource::kScaled || s == FigureSource::kRule;
}

enum class Precision : uint8_t {
  kFp32,
  kAmpFp16,  // torch.autocast(dtype=float16) with fp32 weights
  kAmpBf16,  // torch.autocast(dtype=bfloat16) with fp32 weights
  kBf16,     // pure bfloat16: weights, activations and gradients in bf16
};
inline constexpr auto kPrecisionNames = enum_names<Precision>({
    {Precision::kFp32, "fp32"},
    {Precision::kAmpFp16, "amp-fp16"},
    {Precision::kAmpBf16, "amp-bf16"},
    {Precision::kBf16, "bf16"},
});
inline std::string_view precision_name(Precision p) {
  return kPrecisionNames.name(p);
}

// How image tensors are laid out (--memory-format): NCHW, or the model and its inputs moved
// .to(memory_format=torch.channels_last).
enum class MemoryFormat : uint8_t { kChannelsFirst, kChannelsLast };
inline constexpr auto kMemoryFormatNames = enum_names<MemoryFormat>({
    {MemoryFormat::kChannelsFirst, "channels_first"},
    {MemoryFormat::kChannelsLast, "channels_last"},
});

enum class StorageKind : uint8_t { kInput, kParameter, kBuffer, kActivation };

struct Storage {
  int64_t bytes = 0;
  StorageKind kind = StorageKind::kActivation;
  NodeId producer = kNone;  // the node that allocated it (activations only)
  bool host = false;        // host memory even under CUDA (wrapped Python scalars)
};

// What a value is, where reports need to know more than its shape.
enum class ValueRole : uint8_t {
  kOrdinary,
  kAttentionMatrix,  // (.., L, S) attention scores or probabilities, and their dropout mask
};

struct Value {
  Dims shape;
  Dims strides;
  DType dtype = DType::kFloat32;
  StorageId storage = kNone;
  NodeId producer = kNone;
  bool requires_grad = false;
  ValueRole role = ValueRole::kOrdinary;
};

struct Param {
  ValueId value = kNone;
  std::string name;  // the state_dict key: "layer1.0.conv1.weight"
  ModuleId module = kNone;
  bool trainable = true;
  bool buffer = false;  // running stats and other non-parameter state
  int group = 0;        // the optimizer parameter group it belongs to
  int packing = 1;      // weights stored per element (bitsandbytes' 4-bit: 2 per uint8)
};

struct Node {
  const OpSchema* op = nullptr;
  Attrs attrs;
  std::vector<ValueId> inputs;  // activation inputs first, then the op's parameters
  std::vector<ValueId> outputs;
  ModuleId module = kNone;
  bool recorded = false;        // autograd recorded a backward node (some input needs grad)
  std::vector<ValueId> saved;   // values the backward node keeps
  int64_t workspace_bytes = 0;  // transient memory inside the op during forward
};

struct Module {
  std::string path;  // "" for the model itself, "layer1.0.conv1" below it
  std::string name;  // the last path component (the model name for the root)
  std::string type;  // "Conv2d", "Bottleneck", ...
  ModuleId parent = kNone;
  int depth = 0;
  ValueId output = kNone;
  NodeId first_node = 0;
  NodeId end_node = 0;  // one past the last node run inside it (children included)
};

// A number a model derives from its configuration that users ask about (ACT's encoder
// sequence length), shown by summary and estimate.
struct GraphFact {
  std::string key;  // "encoder_tokens"
  int64_t value = 0;
  std::string text;  // how it is made up: "1 latent + 1 state + 240 + 300 + 300 image tokens"
};

struct Graph {
  std::string model;
  KernelTarget target;
  Precision precision = Precision::kFp32;
  MemoryFormat memory_format = MemoryFormat::kChannelsFirst;
  IdVector<Value> values;
  IdVector<Storage> storages;
  IdVector<Node> nodes;
  IdVector<Module> modules;
  IdVector<Param> params;
  std::vector<ValueId> inputs;  // the batch: model inputs and targets
  std::vector<std::string> input_names;
  ValueId loss = kNone;
  IdVector<bool> on_loss_path;  // per node: some output reaches the loss
  // Low-precision weight copies that torch.autocast caches until the autocast region ends.
  std::vector<ValueId> autocast_cached;
  // Tensors the model returns beside its output (transformers' key/value cache): the training
  // loop holds them with the output until the end of the step.
  std::vector<ValueId> returned;
  // Python locals that keep a tensor alive past its last op: (value, node) holds the value's
  // storage until that node has run (multi_head_attention_forward's q, freed when it returns).
  std::vector<std::pair<ValueId, NodeId>> held_until;
  std::vector<GraphFact> facts;

  const Value& value(ValueId id) const { return values[id]; }
  const Storage& storage_of(ValueId id) const { return storages[value(id).storage]; }
  int64_t batch_size() const;  // first dim of the first input
};

// Bytes of a value's elements (a view counts the elements it shows).
inline int64_t value_bytes(const Value& v) {
  return checked_numel(v.shape).value_or(0) * dtype_bytes(v.dtype);
}

// The weights a parameter holds, as peft and model cards count them: its elements times the
// weights packed in each.
inline int64_t param_weights(const Graph& g, const Param& p) {
  return checked_numel(g.value(p.value).shape).value_or(0) * p.packing;
}

// Does a module path match a pattern where `*` stands for one path component?
bool module_matches(std::string_view path, std::string_view pattern);

// A layer that normalises over the batch: BatchNorm1d/2d/3d and SyncBatchNorm, not
// FrozenBatchNorm2d (fixed statistics).
bool is_batch_norm(const Module& module);

// Per module, the block a report groups it under: a child of the block root, which is the
// model's outermost module with more than one child (ResNet's layer1, ACT's model.encoder).
// The block root and its ancestors are their own block; a top-level module beside the model
// (a loss) is one too.
std::vector<ModuleId> module_blocks(const Graph& g);

}  // namespace trainfit
