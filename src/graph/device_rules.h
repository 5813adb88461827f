// What the kernel target changes about memory, in one place: the op registry, the lowering, the
// trace replay and the estimate ask here instead of testing the device themselves. The cuda
// target is PyTorch 2.x on CUDA, the cpu target PyTorch 1.13 on CPU (graph.h KernelTarget).
//
//   CublasHandles cublas;
//   if (node.op->uses_cublas && cublas.creates_handle(target, /*autograd_thread=*/false))
//     alloc(cublas_workspace_bytes(sm));
//   if (adds_gradient_in_place(target, only_reference)) ... else ... a new tensor for the sum
//
// Note [cuBLAS workspaces]
//  A cuBLAS handle allocates its workspace through PyTorch's allocator when it is first used
//  on a thread (CublasHandlePool.cpp getCurrentCUDABlasHandle, getChosenWorkspaceSize). The
//  forward pass runs on the Python thread; CUDA backward runs on the autograd engine's device
//  thread, which takes a handle of its own. So the first GEMM of forward and the first of
//  backward each allocate one workspace, kept for the rest of the run.
//
// Note [cuBLASLt's workspace]
//  addmm with a bias vector runs through cuBLASLt with its bias epilogue (at::linear on a 2-D
//  or contiguous 3-D input: Blas.cpp's gemm_and_bias path), whose handle takes a workspace of
//  its own, CUBLASLT_WORKSPACE_SIZE (1024 KiB by default), kept like cuBLAS's. On the H100
//  every recorded run allocates it once, on the forward thread, right after the cuBLAS
//  workspace; backward's products (mm) never take it.
//
// Note [cuDNN convolution workspaces]
//  Each cuDNN convolution call allocates the workspace its plan asks for through PyTorch's
//  allocator after its output, and frees it when it returns (Conv_v8.cpp run_conv_plan); the
//  backward call makes grad_input then runs backward-data, makes grad_weight then runs
//  backward-filter. cuDNN 9's heuristics on Hopper pick tensor-core kernels that work on
//  NHWC tensors, so for NCHW tensors the engine converts them in its workspace. Matched against
//  the 49 H100 allocator recordings (resnet18/50, vgg16/_bn at batch 8 and 32 in fp32, resnet50
//  under fp16 autocast; validation/gpu_results), the workspace is, with X, Y and W the input,
//  output and weight bytes in the convolution's dtype:
//   - a pointwise convolution (1x1, stride 1, no padding, one group) whose planes are a
//     multiple of 8 bytes is a GEMM on the NCHW tensors: no workspace (cuDNN asks 0 or 400
//     bytes); its backward-filter sums per-image fp32 partials: N x the weight's elements x 4.
//  - other 1x1 convolutions (strided, or planes not 8-byte aligned): X + Y + 16 in every
//    direction (a 1x1 weight is the same in both layouts).
//  - every other convolution: X + Y + W + 16 forward and backward-data; backward-filter adds
//    split-K fp32 partials of the weight, min(14 x W in fp32, 9 MiB), the most seen.
//  It holds to the byte for 120 of 180 forward and backward-data calls; the rest are other
//  engines, 60 smaller (X + W, or none) and 12 larger (up to 1.8x, 13 MB at most in those runs).
//  channels_last tensors need no conversion: forward and backward-data take none, backward-
//  filter only its partials (not measured). Elsewhere than Hopper this is an estimate.
//  On Hopper the recorded problems take their recorded workspaces (cudnn_measured.inc), and a
//  recorded problem at another batch takes its recording scaled by the batch ratio from the
//  largest recorded batch below: the converted tensors grow with the batch, and the engine is
//  the one cuDNN picked nearest that batch. Between batch 8 and 32 the recordings grow 4x for
//  most problems but 1x to 3x for some, where cuDNN picks another engine at batch 8, so a line
//  through both would carry that change further (resnet50's timing run at batch 64: reserved
//  +0.6% scaled from batch 32, -8.8% with the rule; validation/gpu_cases.py compare). Below
//  every recorded batch the same growth, never faster than the batch, bounds the workspace
//  between the smallest recording scaled down and that recording, and the rule is held
//  within those bounds: of the 115 problems recorded at both batches, batch 32 scaled down
//  to 8 falls below the recording in 61 (by 19.7 MB at most), the bounded rule in 18 (by
//  16.8 MB; validation/cudnn_workspaces.py --check).
//
// Note [Dropout's mask]
//  CUDA's fused kernel (native_dropout) keeps a bool mask, a byte per element; CPU, the
//  in-place variant and p == 1 multiply by a noise tensor in the input's dtype and keep that
//  (Dropout.cpp is_fused_kernel_acceptable, _dropout_impl).
//
// Note [Fused attention]
//  scaled_dot_product_attention on CUDA picks flash, then memory-efficient, then the math path
//  (sdp_utils.cpp): flash takes fp16/bf16 without an arbitrary mask and a head dim of at most
//  256 in multiples of 8; memory-efficient takes fp32 and masks with a head dim in multiples of
//  4, and no grouped-query heads. Both keep q, k, v, the output and an fp32 (B, H, L)
//  logsumexp, which memory-efficient pads to a multiple of 32 queries. Their backward takes fp32
//  scratch besides the gradients (flash_api.cpp mha_bwd: softmax_d (B, H, L rounded to 128) and
//  dq_accum (B, L rounded to 128, H, E); memory-efficient: delta (B, H, L)), and memory-efficient
//  accumulates fp16/bf16 outputs wider than 64 in an fp32 buffer during forward
//  (kernel_forward.h kNeedsOutputAccumulatorBuffer).
//  On Hopper and datacenter Blackwell (compute capability 9.x and 10.x), PyTorch builds whose
//  cuDNN is newer than 9.15 (the CUDA 13 wheels carry 9.19) try cuDNN's attention before flash
//  (sdp_utils.cpp check_prefer_cudnn_attention; TORCH_CUDNN_SDPA_DEPRIORITIZED=1 turns it off):
//  fp16/bf16, head dims in multiples of 8 up to 128 (cuDNN before 9.22 trains no wider), a key
//  length above 1, dropout in steps of 1/16; masks and grouped heads are taken. Its output
//  copies q's layout (MHA.cpp alloc_with_matching_layout), so nn.MultiheadAttention's
//  permute(2, 0, 1, 3).contiguous() of it is a view where flash's needs a copy; it keeps an fp32
//  (B, H, L, 1) softmax statistic and its philox seed and offset (int64, on the device), and its
//  backward accumulates dq in an fp32 (B, H, L, E) buffer beside an fp32 (B, H, L) row sum and,
//  with grouped heads, dk and dv expanded to every query head (cudnn-frontend's SDPA backward
//  node: dQ_accum, softmax_sum, dK_fullhead, dV_fullhead), one workspace per call. The H100's
//  recordings (PyTorch 2.11, cuDNN 9.19) show it: Qwen2.5-0.5B's and Llama-3.2-1B's layers
//  allocate the seed and offset, the output, the statistics and a 256-byte workspace forward,
//  and that scratch plus 256 bytes backward, to the byte; and ViT-B/16 under autocast measured
//  113 MB below flash's copies of the output (116 MB at batch 32).
//
// Note [Memory-efficient attention's backward]
//  _efficient_attention_backward (attention_backward.cu) reads its incoming gradient as
//  grad_out.transpose(1, 2).contiguous(): a copy first unless the gradient comes back in the
//  output's own (B, L, H, E) layout, which nn.MultiheadAttention's permute(2, 0, 1, 3) of the
//  output does not give it. It then makes the gradients of q, k and v, and delta, the fp32
//  (B, H, L) row sums of grad_out x out: fp16 and bf16 kernels compute them themselves into
//  an empty tensor, fp32 ones take them from ATen, (grad_out * out).sum(-1).transpose(-2, -1)
//  .contiguous(), which makes the full-size product, its (B, L, H) sum and the copy, and frees
//  the first two. Then the kernel's workspace (kernel_backward.h workspace_size), per batch
//  and head 4-float-aligned: for dq, which split keys accumulate (every kernel for sm 7.0 on,
//  and all fp16/bf16 ones), one 16-byte lock header and a kBlockSizeI x kBlockSizeJ fp32 tile
//  per query block and per kBlockSizeJ columns of the head dim; for dk and dv, where fp16/bf16
//  kernels cannot keep them in registers (head dims above kBlockSizeI), a kBlockSizeJ x head
//  dim tile per key split. The kernel is the first of the sm80 list (kernels/cutlassB.h) whose
//  head dim fits: 64 x 64 tiles up to 64, then fp32 128 x 64 up to 128 and fp16/bf16 128 x 128
//  (128 x 64 up to 96 on sm 8.6 and 8.9), then 128 x 64 (its shared memory assumed to fit).
//  delta goes when the kernel returns, the workspace then, the gradient's copy last. The H100
//  recordings of ViT-B/16 in fp32 (12 heads of 64 over 197 tokens) show every one of these
//  allocations in every layer's backward, the workspace 6,297,600 bytes at batch 8: 96 rows x
//  4 query blocks x (4 + 64 x 64) floats.
//
// Note [Summing gradients]
//  Two gradients for one tensor meet in the autograd engine's InputBuffer. PyTorch 2.x adds
//  the new one into the old in place when the buffer holds the only reference to it and to its
//  storage (input_buffer.cpp can_accumulate_inplace): not when the old one is a view, which
//  keeps its base and so its storage referenced twice (a view's backward, linear's gradient of
//  a 3-D input). 1.13 always computes old + new into a new tensor.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "graph/op_schema.h"

namespace trainfit {

// The workspace a cuBLAS handle allocates (CublasHandlePool.cpp getChosenWorkspaceSize):
// 4096 KiB x 2 + 16 KiB x 8 before Hopper, 32 MiB on Hopper and later (sm 90+).
int64_t cublas_workspace_bytes(int sm);

// Whether a recorded aten op (a trace's "aten::addmm") runs a cuBLAS GEMM on CUDA, as an op
// schema's uses_cublas says for the zoo's ops.
bool aten_op_uses_cublas(std::string_view aten_name);

// Which GEMMs create a cuBLAS handle and so allocate its workspace (Note [cuBLAS workspaces]).
class CublasHandles {
 public:
  // For a GEMM on the forward thread or the autograd thread: true the first time on each,
  // under the cuda target.
  bool creates_handle(const KernelTarget& target, bool autograd_thread);
  // For a cuBLASLt product (Note [cuBLASLt's workspace]): true the first time, under cuda.
  bool creates_lt_handle(const KernelTarget& target);

 private:
  bool forward_ = false;
  bool backward_ = false;
  bool lt_ = false;
};

// Note [Dropout's mask]: whether dropout keeps a bool mask (else a noise tensor).
bool keeps_dropout_mask(const KernelTarget& target, bool inplace, double p, int64_t elements);
// What the target keeps for a noise tensor a CPU run recorded (a trace), which does not say
// whether the dropout ran in place: replayed as the usual out-of-place dropout.
int64_t dropout_kept_bytes(const KernelTarget& target, int64_t noise_bytes, int64_t itemsize);

// Note [cuBLASLt's workspace]
int64_t cublaslt_workspace_bytes();

// A convolution as cuDNN sees it (conv_transpose's forward is backward-data of the conv with
// input and output exchanged: describe the convolution).
struct ConvProblem {
  int64_t batch = 1;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t groups = 1;
  Dims in_spatial, out_spatial, kernel, stride, padding, dilation;
  int64_t itemsize = 4;
  DType dtype = DType::kFloat32;  // of the tensors (bf16 and fp16 share an itemsize, not engines)
  MemoryFormat memory_format = MemoryFormat::kChannelsFirst;
};
struct ConvWorkspaces {
  int64_t forward = 0;
  int64_t backward_data = 0;
  int64_t backward_filter = 0;
  int measured = 0;  // how many of the three an H100 recording gave (the rest: scaled or rule)
  // Where each direction's figure comes from: forward, backward-data, backward-filter.
  std::array<FigureSource, 3> source{FigureSource::kRule, FigureSource::kRule, FigureSource::kRule};
  // Each direction's upper bound (Note [Workspace bounds]): its figure where measured.
  std::array<int64_t, 3> bound{};
  int64_t bytes(int direction) const {
    return direction == 0 ? forward : direction == 1 ? backward_data : backward_filter;
  }
};

// Note [Workspace bounds]
//  A workspace no recording measured for its problem on this GPU (scaled from another batch,
//  borrowed from fp16 for bf16, or the rule: every problem on a GPU without recordings) is a
//  central figure that can be off either way: the rule is within rounding for 218 of the 421
//  recorded problems, higher for 99, lower for 104. Each such workspace also has an upper
//  bound (Buffer::bound_bytes), and the estimate replays the step's events a second time with
//  every unmeasured workspace at it, so that the report can say how high reserved memory could
//  go and `fit` can decide by it. cuDNN leaves nothing to derive a bound from: in heuristic mode
//  PyTorch runs the first engine the heuristics list whose workspace it can allocate (Conv_v8.cpp
//  try_configs, moving on when an allocation runs out of memory), and what an engine asks is
//  cuDNN's. So the bound is measured: the recordings' workspaces against S, the converted tensors X
//  + Y + W in the convolution's dtype, plus for backward-filter min(N, 64) fp32 copies of the
//  weight (the per-image partials of the GEMM engines). For a family of problems (direction; a GEMM
//  on NCHW planes, another 1x1 or a larger kernel; 1-D or 2-D; fp32 or fp16) the bound is 1.25
//  times the largest ratio any recorded problem of the family reached, times S, and never
//  below the central rule, plus 1 KiB for the few hundred bytes GEMM engines ask. Families no
//  recording covers (grouped and depthwise, 3-D, dilated, channels_last, bf16) take the
//  largest ratio of the direction over every family. Left out one model at a time (fitted on
//  the other six, checked on its problems: validation/cudnn_workspaces.py --leave-one-out),
//  the bound falls below no recorded workspace; without the 1.25 it falls below 3. The families
//  make it tighter, not safer: the direction's ratio for every family is never smaller, and
//  without either it falls below 2.
//  The central figure stays the rule: the bound answers "could it need more", not "how much".
int64_t cudnn_conv_bound(const ConvProblem& conv, int direction);
// Note [cuDNN benchmark mode]
//  With torch.backends.cudnn.benchmark = True the first call of each problem (its plan-cache
//  key: direction, shapes, dtype, layout) times every candidate plan: PyTorch allocates one
//  workspace of the largest candidate's size that fits the free memory (the trial), runs them
//  all in it, frees it, empties the allocator's cache (cudnn benchmark_empty_cache), then runs
//  the fastest plan with its own workspace; later calls run the cached plan (Conv_v8.cpp
//  get_plans_from_find, run_single_conv). cuDNN's candidates and their workspaces (up to
//  5.3 GB for resnet50 at batch 64) follow no rule trainfit knows: the trials and the chosen
//  plans are the H100 recording's where it measured the problem (cudnn_benchmark_measured.inc);
//  elsewhere the trial is unknown and taken as the heuristic plan's workspace, which the
//  report says.
struct ConvPlanSearch {
  int64_t trial_bytes = 0;   // the largest candidate's workspace, allocated once
  int64_t chosen_bytes = 0;  // the fastest plan's, at every call
  bool measured = false;     // from a recording (else both are the heuristic's workspace)
};
// `direction`: 0 forward, 1 backward-data, 2 backward-filter.
ConvPlanSearch cudnn_benchmark_search(const ConvProblem& conv, int direction, int sm);
// A plan-cache key of the problem and direction, equal for equal problems.
uint64_t cudnn_problem_key(const ConvProblem& conv, int direction);

// The rule alone, wherever no recording measured the problem.
ConvWorkspaces cudnn_conv_rule(const ConvProblem& conv);
// Note [cuDNN convolution workspaces]. On Hopper (sm 90) the problems the H100 recordings
// measured take their recorded workspaces (cudnn_measured.inc); the rule gives the rest. Each
// direction not measured also has its bound (Note [Workspace bounds]).
ConvWorkspaces cudnn_conv_workspaces(const ConvProblem& conv, int sm);

// Note [cuDNN's im2col gather]
//  cuDNN's implicit-GEMM kernels load a convolution's input in 16-byte vectors of channels.
//  Where the input channels per group times the element size are no whole number of 16 bytes
//  (an image's 3 channels in fp32 or fp16), it runs kernels that read the im2col element by
//  element through the caches, M x K elements of each product, forward and backward-filter
//  (sm80_xmma_fprop_implicit_gemm_indexed_wo_smem in the H100 profile of ACT's first
//  convolutions: 257 us a camera where the product's rate gives 29).
bool cudnn_gathers_im2col(int64_t channels_per_group, int64_t element_bytes);

// Note [Reductions' staging]
//  A CUDA reduction (at::sum and friends, Reduce.cuh) sizes its grid by the device
//  (setReduceConfig): when too few blocks would share out the work, it splits each output's
//  inputs over `ctas_per_output` blocks, which stage partial results in a buffer from
//  PyTorch's allocator, with an int semaphore per block column; both are freed when the
//  kernel has been launched, semaphores first. A linear layer's bias gradient, the sum of the
//  output gradient over every row, is such a reduction: on the H100 with 1,576 rows of 768
//  (ViT-B/16 at batch 8) 25 blocks per output stage 9,830,400 bytes, with 24 bytes of
//  semaphores; at 6,304 rows 99 blocks, 38,928,384 bytes (the recordings, to the byte).
struct ReduceProblem {
  int64_t outputs = 1;            // results
  int64_t inputs_per_output = 1;  // values summed into each
  bool contiguous_inputs = true;  // each result's inputs adjacent (a row sum), else strided
  int64_t itemsize = 4;           // of the input
  int64_t acc_itemsize = 4;       // of the accumulator: float for fp32, fp16 and bf16
  int sm_count = 0;
  int sm = 0;  // compute capability x 10: threads per SM
};
struct ReduceScratch {
  int64_t buffer = 0;      // bytes staged between blocks; 0: no global reduction
  int64_t semaphores = 0;  // bytes of int semaphores
};
ReduceScratch cuda_reduce_scratch(const ReduceProblem& reduce);

// Note [Fused attention]: the kernel scaled_dot_product_attention runs on CUDA.
enum class SdpaBackend : uint8_t { kFlash, kEfficient, kMath, kCudnn };
struct SdpaProblem {
  DType dtype = DType::kFloat32;
  bool mask = false;
  int64_t head_dim = 0;
  int64_t value_dim = 0;
  int64_t keys = 0;  // the key sequence's length
  bool grouped_heads = false;
  double dropout = 0;
  int sm = 0;  // compute capability x 10
};
SdpaBackend cuda_sdpa_backend(const SdpaProblem& p);

// Note [Fused attention]: what a fused kernel allocates over batch x heads rows of `queries`
// queries (head dim `head_dim`, values `value_dim` wide, in `dtype`), beside its output and the
// gradients of q, k and v.
struct FusedAttentionBytes {
  int64_t logsumexp = 0;           // kept from forward to backward
  int64_t forward_workspace = 0;   // while forward runs
  int64_t backward_workspace = 0;  // while backward runs (without grouped-query expansion)
  // What backward makes and frees after the gradients, in order, where one workspace does not
  // say it (Note [Memory-efficient attention's backward]); MemoryStep kAlloc and kFree only.
  std::vector<MemoryStep> backward_steps;
};
struct FusedAttentionShape {
  int64_t rows = 1;  // batch x heads
  int64_t queries = 0;
  int64_t keys = 0;
  int64_t head_dim = 0;
  int64_t value_dim = 0;
  DType dtype = DType::kFloat32;
  int sm = 0;  // compute capability x 10
};
FusedAttentionBytes fused_attention_bytes(SdpaBackend backend, const FusedAttentionShape& shape);
// The workspace of the memory-efficient backward kernel (kernel_backward.h workspace_size).
int64_t efficient_attention_workspace(const FusedAttentionShape& shape);

// Note [Summing gradients]: true when the sum reuses the old gradient's memory.
bool adds_gradient_in_place(const KernelTarget& target, bool only_reference);

// Wrapped Python scalars are host tensors: device memory on the cpu target, none on CUDA.
bool host_tensors_use_device_memory(const KernelTarget& target);

// Memory a kernel takes for itself while it runs (cuDNN and cuBLAS scratch): CUDA only.
bool kernels_take_workspaces(const KernelTarget& target);

// Note [Softmax's backward]
//  CUDA's softmax backward (SoftMax.cu softmax_backward_cuda_out) multiplies the incoming
//  gradient by the saved output into a temporary of the full size before its kernel, after the
//  gradient it returns is allocated, and frees it when done; log_softmax's and the CPU's take
//  none. The H100's recording of ACT (batch 32, snapshots.tar.xz L_act-default-b32) shows it in
//  every attention's backward: the gradient, then the 93 MB product, freed at once.
bool softmax_backward_takes_product(const KernelTarget& target);

// torch.amp.GradScaler goes with fp16 autocast on CUDA: it scales the loss and unscales the
// gradients before the step.
bool uses_grad_scaler(const KernelTarget& target, Precision precision);

// Non-reentrant activation checkpointing (use_reentrant=False): 2.x stops recomputing a
// module once every tensor its backward needs is back; 1.13 re-runs the whole module.
bool recompute_stops_early(const KernelTarget& target);

}  // namespace trainfit
