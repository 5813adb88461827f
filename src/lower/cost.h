// The cost model: the work of one training step, kernel by kernel, before any GPU is named.
// Each kernel has its FLOPs, the bytes it moves through device memory and, for products, its
// GEMM shape; the eager CPU side has its op dispatches and kernel launches. The estimate
// stage turns this into seconds with a GPU's peaks (estimate/step_time.h).
//
//   Result<StepCost> c = step_cost(graph, training, {.channels_last = true});
//   for (const KernelCost& k : c->kernels) ... k.part, k.flops, k.bytes, k.gemm
//
// What it counts:
// - forward: one kernel per op that is not a view: reads its inputs (a gather only the rows it
//   returns), writes its outputs; products carry their GEMM shape and math (fp32, TF32 as
//   PyTorch's defaults or --tf32 say, fp16 or bf16 under autocast).
// - backward: per recorded op on the loss path, one kernel per input gradient it makes (none
//   for a gradient that is a view of the incoming one); the gradients of a product's operands
//   are products of the same size; an op's parameter gradients that are not products share
//   one pass. Each reads the incoming gradients and the saved tensors and writes its gradient.
// - recompute: checkpointed modules' forward ops again, as far as PyTorch re-runs them.
// - optimizer: the kernels of the implementation PyTorch runs (torch/optim adam.py, sgd.py:
//   the for-loop per parameter, foreach over lists in multi_tensor_apply launches, fused in
//   one), and GradScaler's unscale under fp16 autocast.
// - gradient accumulation: forward, backward and recompute once per micro-batch, and each
//   micro-batch after the first adds its gradients into .grad.
// - convolutions whose input channels fill less than a 16-byte vector (3 channels of an image):
//   cuDNN gathers every element of the im2col (M x K) from the caches, in forward and in the
//   weight gradient (Note [cuDNN's im2col gather]).
// - channels_first convolutions on tensor cores (TF32, fp16, bf16): cuDNN's kernels take NHWC,
//   so their activations are transposed on the way in and out (channels_last avoids it).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "base/enum_names.h"
#include "base/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"
#include "lower/training.h"

namespace trainfit {

enum class StepPart : uint8_t { kForward, kBackward, kRecompute, kOptimizer };
inline constexpr size_t kStepPartCount = 4;
inline constexpr auto kStepPartNames = enum_names<StepPart>({
    {StepPart::kForward, "forward"},
    {StepPart::kBackward, "backward"},
    {StepPart::kRecompute, "recompute"},
    {StepPart::kOptimizer, "optimizer"},
});

// The arithmetic a product runs in.
enum class MathPath : uint8_t { kFp32, kTf32, kFp16, kBf16 };
inline constexpr auto kMathPathNames = enum_names<MathPath>({{MathPath::kFp32, "fp32"},
                                                             {MathPath::kTf32, "tf32"},
                                                             {MathPath::kFp16, "fp16"},
                                                             {MathPath::kBf16, "bf16"}});

// The bytes of one operand element a product computes with: 2 for fp16 and bf16, else 4.
int64_t math_element_bytes(MathPath math);

struct CostOptions {
  // torch.backends.cuda.matmul.allow_tf32: off by default since PyTorch 1.12 (--tf32 sets it,
  // as torch.set_float32_matmul_precision("high") does).
  bool tf32_matmul = false;
  // torch.backends.cudnn.allow_tf32: on by default, so fp32 convolutions run in TF32.
  bool tf32_conv = true;
  MemoryFormat memory_format = MemoryFormat::kChannelsFirst;
};

// The eager host's work: ATen ops dispatched (from Python in forward and in the optimizer, by
// the autograd engine in backward), and what costs it besides.
struct CpuWork {
  double dispatches = 0;
  double launches = 0;  // kernels launched
  // Tensors made by C++ without a kernel of their own: the pieces of list(x) (unbind's selects),
  // the slices a list op's gradient is cut into, the host scalars Adam reads with .item().
  double views = 0;
  double edges = 0;   // gradients the autograd engine hands on beyond one per node (stack's)
  double params = 0;  // parameters a Python loop of the optimizer visits (_init_group, zero_grad)
  double cudnn_calls = 0;  // cuDNN convolutions run (each direction its own call)
  // Python calls into torch that a TorchFunctionMode intercepts first (the DeviceContext that
  // torch.set_default_device installs sees every one).
  double mode_calls = 0;
  // nn.Module calls: Module.__call__ and the Python frame of its forward, around the ops.
  double module_calls = 0;
  // Device-to-host reads (.item() of a GPU scalar): each copies after the queued kernels and
  // the host waits for it.
  double syncs = 0;

  CpuWork& operator+=(const CpuWork& o) {
    dispatches += o.dispatches;
    launches += o.launches;
    views += o.views;
    edges += o.edges;
    params += o.params;
    cudnn_calls += o.cudnn_calls;
    mode_calls += o.mode_calls;
    module_calls += o.module_calls;
    syncs += o.syncs;
    return *this;
  }
  bool empty() const {
    return dispatches == 0 && launches == 0 && views == 0 && edges == 0 && params == 0 &&
           cudnn_calls == 0 && mode_calls == 0 && module_calls == 0 && syncs == 0;
  }
};

// One kernel (or `launches` of the same shape back to back) and the host work that issues it.
// An entry without launches is host work alone (views, the optimizer's Python loops).
struct KernelCost {
  StepPart part = StepPart::kForward;
  NodeId node = kNone;  // the op whose kernel it is (none: gradient sums, the optimizer)
  double flops = 0;
  double bytes = 0;  // read and written in device memory
  // Read besides `bytes` through the caches, without reuse in shared memory: the im2col of a
  // convolution with too few input channels (GpuEfficiency::im2col_gather).
  double gathered_bytes = 0;
  bool is_gemm = false;
  GemmShape gemm;  // with is_gemm
  // Where its blocks are many and small (OpSchema::backward_grid): the kernel takes at least a
  // wave of the SMs' resident blocks per GpuTiming::kernel_overhead_s. Zero blocks: not counted.
  KernelGrid grid;
  MathPath math = MathPath::kFp32;
  int64_t launches = 1;  // kernels of this shape launched back to back (multi_tensor_apply)
  int64_t repeat = 1;    // times per optimizer step (micro-batches)
  // A layout change cuDNN makes only where `math` runs on tensor cores (NCHW to NHWC).
  bool tensor_core_layout = false;
  CpuWork host;  // what the host does before the kernel can run (each repeat)
};

// A parameter's gradient is complete once the first `kernels` kernels have run (its last
// gradient in the first micro-batch's backward): when DDP may all-reduce it.
struct GradReady {
  size_t kernels = 0;
  int32_t param = 0;  // into Graph::params
};

struct StepCost {
  std::vector<KernelCost> kernels;
  std::vector<GradReady> grad_ready;  // in backward's order; a parameter's last entry counts
  // Kernels up to here are the ops' own backward kernels, in order; the gradient sums of tensors
  // used twice and the accumulation's adds follow (they run interleaved with them).
  size_t backward_end = 0;
  int micro_batches = 1;
  std::array<CpuWork, kStepPartCount> cpu{};  // per step (micro-batches included): the sums
  int64_t samples = 0;                        // per optimizer step: batch x micro-batches
};

Result<StepCost> step_cost(const Graph& graph, const TrainingConfig& training,
                           const CostOptions& options);

// Launches of one foreach op over tensors of `numels` elements with `depth` tensor lists, as
// multi_tensor_apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh) groups them: 65,536
// elements a chunk, at most 320 chunks and {110, 64, 48, 36, 30} tensors (depth 1-5) a launch.
int64_t multi_tensor_launches(const std::vector<int64_t>& numels, int depth);

}  // namespace trainfit
