// One op = one OpSchema: its attributes, shape/dtype rule, parameters, what autograd keeps
// for backward, transient workspace, and a one-line doc. Families of ops live in ops_*.cc
// and are listed in op_registry.cc; nothing else in trainfit switches on op type.
//
//   OpSchema s;
//   s.name = "relu";
//   s.doc = "max(x, 0); autograd keeps the output";
//   s.infer = [](const OpCall& c, std::vector<OutputSpec>& out) { ... return Status(); };
//   s.saved = [](const OpCall& c) { return SavedList{saved_output(0)}; };
//
// Rules see an OpCall: attributes (defaults filled in), input values (activation inputs first,
// then parameters), and the kernel target (device, PyTorch version).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/attrs.h"
#include "graph/graph.h"

namespace trainfit {

class GraphBuilder;

struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  std::optional<AttrValue> default_value;  // nullopt: required
  std::string_view doc;
};

// How torch.autocast treats the op (aten/src/ATen/autocast_mode.cpp).
enum class Autocast : uint8_t {
  kUnchanged,  // runs in whatever dtype arrives
  kLower,      // inputs cast to the autocast dtype (fp16/bf16); fp32 weights cast once, cached
  kFp32,       // low-precision inputs cast up to fp32
  kPromote,    // inputs cast to the widest input dtype
  // Computes in fp32 through a dtype argument (softmax, log_softmax, sum, mean): the builder
  // sets the schema's compute_dtype_attr instead of inserting a cast.
  kFp32Output,
};

struct OpCall {
  const Attrs& attrs;
  std::span<const Value* const> inputs;  // activation inputs, then parameters
  KernelTarget target;
  Precision precision = Precision::kFp32;
  MemoryFormat memory_format = MemoryFormat::kChannelsFirst;

  const Value& in(size_t i) const { return *inputs[i]; }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  bool requires_grad(size_t i) const { return has_input(i) && inputs[i]->requires_grad; }
  bool on_cuda() const { return target.device == Device::kCuda; }
  bool torch2() const { return target.torch == TorchVersion::k2; }
};

struct OutputSpec {
  Dims shape;
  Dims strides;
  DType dtype = DType::kFloat32;
  int alias_of = -1;           // shares input `alias_of`'s storage: a view or an in-place op
  bool host = false;           // lives in host memory
  bool differentiable = true;  // false for indices, masks and other non-float results

  static OutputSpec fresh(Dims shape, DType dtype);
  static OutputSpec fresh_strided(Dims shape, Dims strides, DType dtype);
  static OutputSpec alias(int input, Dims shape, Dims strides, DType dtype);
  // A by-product kept for backward only (indices, masks, statistics): no gradient flows.
  static OutputSpec aux(Dims shape, DType dtype);
};

struct SavedRef {
  bool output = false;
  int index = 0;
};
inline SavedRef saved_input(int i) {
  return {false, i};
}
inline SavedRef saved_output(int i) {
  return {true, i};
}
using SavedList = std::vector<SavedRef>;

struct ParamSpec {
  std::string name;  // local name: "weight", "in_proj_weight", "out_proj.bias"
  Dims shape;
  bool buffer = false;
  std::optional<DType> dtype;  // nullopt: the model's parameter dtype
  bool trainable = true;       // false for state that never trains (FrozenBatchNorm2d's affine)
  int packing = 1;             // weights stored per element (bitsandbytes' 4-bit: 2 per uint8)
};

using InferFn = std::function<Status(const OpCall&, std::vector<OutputSpec>&)>;
// cuDNN's benchmark mode (device_rules.h, Note [cuDNN benchmark mode]): the problem a kernel
// searches plans for, the workspace of its first call's trial and of the plan it picks.
struct PlanSearch {
  uint64_t problem = 0;
  int64_t trial_bytes = 0;
  int64_t chosen_bytes = 0;
  bool measured = false;
};

// The tensors an op makes and frees around its outputs, in order: in forward, what its Python
// code makes (Liger's fused linear cross-entropy: its gradient buffers, then a chunk of logits
// at a time, then the loss; outputs a plan does not place are made after its steps; what it
// leaves allocated is freed when the op returns); in backward, a kernel's scratch
// (BackwardSpec::kernel_steps).
struct MemoryStep {
  enum class Kind : uint8_t {
    kOutput,  // makes output `arg`
    kAlloc,   // makes a tensor of `arg` bytes
    kFree,    // frees the tensor made by kAlloc step number `arg` (counting kAlloc steps only)
  };
  Kind kind = Kind::kAlloc;
  int64_t arg = 0;
};

// Plays `steps` in order: kOutput through output(arg), kAlloc through alloc(bytes), which returns
// a handle, kFree through release(that kAlloc step's handle). Returns the handles still held,
// in kAlloc order (`none` where freed).
template <typename Handle, typename Output, typename Alloc, typename Release>
std::vector<Handle> play_steps(std::span<const MemoryStep> steps, Handle none, Output output,
                               Alloc alloc, Release release) {
  std::vector<Handle> held;
  for (const MemoryStep& step : steps) {
    switch (step.kind) {
      case MemoryStep::Kind::kOutput:
        output(step.arg);
        break;
      case MemoryStep::Kind::kAlloc:
        held.push_back(alloc(step.arg));
        break;
      case MemoryStep::Kind::kFree:
        release(held[static_cast<size_t>(step.arg)]);
        held[static_cast<size_t>(step.arg)] = none;
        break;
    }
  }
  return held;
}

// The gradient a backward node produces for one input: a new tensor of the input's shape and
// dtype, or a view of the gradient arriving for output `alias_output` (views, add, cat, ...).
struct GradRule {
  int input = 0;
  int alias_output = -1;
  // With alias_output: the very tensor that arrived (add's pass-through) rather than a new view
  // of it. AccumulateGrad steals a view, even of a shared buffer, but copies a shared tensor.
  bool same_tensor = false;
  // The gradient is a tensor the forward made and saved (Liger's fused linear cross-entropy
  // computes its gradients in the forward): no new memory. It is made after the node releases
  // its saved tensors, in the bytes they free.
  bool from_saved = false;
  // The gradient is a view of a tensor the kernel made (linear over more than two dims
  // reshapes mm's result back to the input's shape). A view keeps its base, so PyTorch 2.x
  // adds another gradient to it out of place (Note [Summing gradients]).
  bool view = false;
  // The scratch of the kernel that computes this gradient (CUDA: cuDNN's backward-data and
  // backward-filter workspaces, a reduction's staging buffer and semaphores): allocated in
  // order right after the gradient, freed last first when it is done.
  std::vector<int64_t> workspace;
  FigureSource workspace_source = FigureSource::kDerived;  // where those sizes come from
  // Of one workspace not measured (a cuDNN convolution's), its upper bound (device_rules.h,
  // Note [Workspace bounds]); -1: none.
  int64_t workspace_bound_bytes = -1;
  // A full-size product the kernel makes before it runs and reads back (CUDA's softmax
  // backward, grad * output: Note [Softmax's backward]): its memory is one of `workspace`, its
  // pass a kernel of its own in the step time.
  int64_t product_first_bytes = 0;
  // Under cuDNN's benchmark mode, the kernel's plan search; its chosen plan's workspace then
  // replaces `workspace`.
  std::optional<PlanSearch> plan_search;
  // A broadcast input's gradient: the formula gives it at the output's shape and the engine
  // sums it down to the input's once the node's formulas have all run (engine.cpp
  // validate_outputs, in input order), freeing the formula's tensor then. `formula_bytes` is
  // that tensor (0: the formula hands on the incoming gradient itself, as add's does).
  bool summed = false;
  int64_t formula_bytes = 0;
  // The strides the kernel gives a new gradient (Note [Gradient layouts]); empty: contiguous.
  Dims strides;
};
struct BackwardSpec {
  std::vector<GradRule> grads;
  // Transient memory inside the backward kernel (CUDA), allocated after the gradients.
  int64_t workspace_bytes = 0;
  // Tensors the backward function makes before its gradients, on every device (bitsandbytes'
  // dequantized absmax, then weight): each is made in turn; all but the last are freed before
  // the gradients are made, the last after them.
  std::vector<int64_t> scratch;
  // A contiguous copy the backward kernel makes of a saved input that is not contiguous
  // (CUDA; layer_norm_backward_cuda's input.expect_contiguous()), before the gradients, freed
  // when the kernel returns.
  int64_t input_copy_bytes = 0;
  // Tensors the backward kernel makes and frees after the gradients, in order, where one
  // workspace does not say it (CUDA; memory-efficient attention's delta and workspace);
  // MemoryStep kAlloc and kFree only. Any left are freed when it returns.
  std::vector<MemoryStep> kernel_steps;
};
using BackwardFn = std::function<BackwardSpec(const OpCall&)>;

// Gradients' layouts (Note [Gradient layouts], src/lower/grad_layout.h). A view's backward: the
// strides of the gradient it hands to an input of shape `in`, given the strides `incoming` of
// the gradient that arrived for its output of shape `out`; nullopt where it must copy (a
// reshape the strides do not allow).
using GradLayoutFn = std::function<std::optional<Dims>(const Attrs&, const Dims& in,
                                                       const Dims& out, const Dims& incoming)>;
// What a backward kernel does with a gradient of its output that is not contiguous.
enum class DenseGrad : uint8_t {
  kAsIs,         // reads it as it is
  kFoldRows,     // folds all but the last dim into rows: a copy before the node when not a view
  kCopyLast,     // copies it after making its gradients (layer_norm's CUDA dY.contiguous())
  kCudnnCopies,  // cuDNN's backward-data and backward-filter each copy it (CUDA)
  // copies it into the output's own layout (strides) before making its gradients, freed when
  // it returns (CUDA; memory-efficient attention's grad_out.transpose(1, 2).contiguous())
  kOutputLayoutFirst
};

using ForwardStepsFn = std::function<std::vector<MemoryStep>(const OpCall&)>;

// Validates what parameter shapes depend on (input ranks, channel counts) before creating them.
using ParamsFn = std::function<Result<std::vector<ParamSpec>>(const OpCall&)>;
using SavedFn = std::function<SavedList(const OpCall&)>;
using WorkspaceFn = std::function<int64_t(const OpCall&)>;
using PlanSearchFn = std::function<std::optional<PlanSearch>(const OpCall&)>;
// A product as GEMM kernels run it: `count` x `batch` products of an M x K by a K x N matrix
// (convolutions as implicit GEMMs: M = output positions, N = output channels, K = input
// channels x kernel taps, batch = groups). The gradient of each input in `operands` (a bitmask
// of input indices) is a product of the same size with the dimensions exchanged.
struct GemmShape {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int count = 1;
  uint32_t operands = 0b11;

  double flops() const;  // a multiply-add is two
  bool operand(size_t input) const { return input < 32 && ((operands >> input) & 1U) != 0; }
};
// The product an op's forward kernel computes, given output 0's shape.
using GemmFn = std::function<GemmShape(const OpCall&, const Dims& output)>;
// Bytes the forward kernels read from the inputs, where that is not each input once (a gather
// reads some rows, a normalisation reads its input twice).
using ReadBytesFn = std::function<int64_t(const OpCall&, const Dims& output)>;

// A kernel's launch: `blocks` thread blocks of `threads` threads each.
struct KernelGrid {
  int64_t blocks = 0;
  int threads = 0;
};
using GridFn = std::function<KernelGrid(const OpCall&)>;
// Composite ops expand into registry ops through the builder and return their outputs.
using DecomposeFn =
    std::function<std::vector<ValueId>(GraphBuilder&, std::span<const ValueId>, const Attrs&)>;

// Where a workspace's size comes from, and how large it could be (Note [Workspace bounds]).
struct WorkspaceFigure {
  FigureSource source = FigureSource::kDerived;
  int64_t bound_bytes = -1;  // -1: exact
};

struct OpSchema {
  std::string_view name;
  std::string_view family;
  std::string_view doc;
  std::vector<AttrSpec> attrs;
  int min_inputs = 1;  // activation inputs (parameters excluded)
  int max_inputs = 1;
  Autocast autocast = Autocast::kUnchanged;
  // PyTorch 1.13's CPU autocast (the cpu profile), where its KERNEL_CPU lists treat the op
  // otherwise than CUDA's (autocast_mode.cpp, checked op by op in tests/data/op_cases.json);
  // nullopt: as on CUDA.
  std::optional<Autocast> cpu_autocast;
  bool differentiable = true;
  ParamsFn params;        // optional: ops without parameters leave it empty
  InferFn infer;          // primitive ops
  SavedFn saved;          // primitive ops
  WorkspaceFn workspace;  // primitive ops
  // Optional: where the workspace's size comes from, where it is not derived, and its upper
  // bound (a cuDNN convolution's: device_rules.h, Note [Workspace bounds]).
  std::function<WorkspaceFigure(const OpCall&)> workspace_figure;
  // The workspace is made before the outputs (layer_norm's contiguous copy of its input),
  // not between them and the kernel.
  bool workspace_first = false;
  // Optional: the forward kernel's plan search under cuDNN's benchmark mode (convolutions).
  PlanSearchFn plan_search;
  DecomposeFn decompose;  // composite ops (instead of infer/saved/workspace)
  // Optional: without it, every input that needs a gradient gets a new tensor.
  BackwardFn backward;
  // With an alias rule: how the gradient's strides cross it (optional: the same strides when
  // the input's shape is the output's, else contiguous), and whether what it hands on is a
  // view of the incoming gradient, which keeps it as its base (transpose, reshape, cat), rather
  // than the very tensor (add's pass-through, contiguous).
  GradLayoutFn grad_layout;
  bool grad_is_view = false;
  DenseGrad dense_grad = DenseGrad::kAsIs;
  // Optional: the op's own tensors in forward, around its outputs (see MemoryStep).
  ForwardStepsFn forward_steps;
  // When several of its parameters get their gradients in one backward node, the input whose
  // AccumulateGrad runs first (the order DDP rebuilds its buckets in); -1: input order. F.linear
  // runs addmm(bias, x, weight.t()): the bias's gradient goes to AccumulateGrad directly, the
  // weight's through t()'s backward node, so the bias (input 2) is ready first.
  int first_ready_input = -1;
  bool uses_cublas = false;  // its forward and backward run cuBLAS GEMMs (CUDA workspace)
  // Optional: its forward runs through cuBLASLt (addmm's bias epilogue), whose handle takes a
  // workspace of its own (device_rules.h, Note [cuBLASLt's workspace]).
  std::function<bool(const OpCall&)> uses_cublaslt;
  bool uses_cudnn = false;  // a cuDNN convolution (TF32 by default, NHWC tensor-core kernels)
  // Optional: products and convolutions. Their FLOPs come from it; other ops cost one
  // operation per element of each output that is not a view.
  GemmFn gemm;
  ReadBytesFn read_bytes;  // optional: without it the forward reads each input once
  // Optional: whether its products read their M x K operand element by element, without
  // reuse in shared memory, when it computes with elements of `element_bytes` (Note [cuDNN's
  // im2col gather]).
  std::function<bool(const OpCall&, int64_t element_bytes)> gathers_im2col;
  // Optional: the grid of a backward kernel of many small blocks, which runs in waves of what
  // the SMs hold at once however few bytes each block moves (group_norm's per-channel sums).
  GridFn backward_grid;
  // Views, copies and fills (reshape, cat, pad, full, ...): no arithmetic, so no FLOPs.
  bool data_movement = false;
  // With Autocast::kFp32Output: the string attribute naming the dtype it computes in.
  std::string_view compute_dtype_attr;

  bool composite() const { return static_cast<bool>(decompose); }
};

// The gradients a primitive node produces: its schema's rule, or a new tensor per input that
// needs a gradient.
BackwardSpec backward_of(const OpSchema& schema, const OpCall& call);
// A rule making every input that needs a gradient a view of output 0's gradient.
BackwardSpec alias_backward(const OpCall& call);
// The rules of `spec` in the order a backward node computes them: PyTorch's generated code runs
// derivatives.yaml's formulas in sorted order of the names they are for (bmm: mat2 before
// self; addmm: mat1, mat2, self), so `order` lists input indices by their names' order.
void order_grads(BackwardSpec& spec, std::initializer_list<int> order);

// Rule helpers shared by the op families.
Result<Dims> spatial_attr(const Attrs& attrs, std::string_view name, size_t n);
int64_t no_workspace(const OpCall&);
Status expect_rank(const OpCall& call, size_t input, size_t min_rank, size_t max_rank,
                   std::string_view what);
Status expect_floating(const OpCall& call, size_t input);

}  // namespace trainfit
