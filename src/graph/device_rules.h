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
// Note [Dropout's mask]
//  CUDA's fused kernel (native_dropout) keeps a bool mask, a byte per element; CPU, the
//  in-place variant and p == 1 multiply by a noise tensor in the input's dtype and keep that
//  (Dropout.cpp is_fused_kernel_acceptable, _dropout_impl).
//
// Note [Summing gradients]
//  Two gradients for one tensor meet in the autograd engine's InputBuffer. PyTorch 2.x adds
//  the new one into the old in place when the buffer holds the only reference to it
//  (input_buffer.cpp can_accumulate_inplace); 1.13 always computes old + new into a new tensor.
#pragma once

#include <cstdint>
#include <string_view>

#include "graph/graph.h"

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

 private:
  bool forward_ = false;
  bool backward_ = false;
};

// Note [Dropout's mask]: whether dropout keeps a bool mask (else a noise tensor).
bool keeps_dropout_mask(const KernelTarget& target, bool inplace, double p, int64_t elements);
// What the target keeps for a noise tensor a CPU run recorded (a trace), which does not say
// whether the dropout ran in place: replayed as the usual out-of-place dropout.
int64_t dropout_kept_bytes(const KernelTarget& target, int64_t noise_bytes, int64_t itemsize);

// Note [Summing gradients]: true when the sum reuses the old gradient's memory.
bool adds_gradient_in_place(const KernelTarget& target, bool only_reference);

// Wrapped Python scalars are host tensors: device memory on the cpu target, none on CUDA.
bool host_tensors_use_device_memory(const KernelTarget& target);

// Memory a kernel takes for itself while it runs (cuDNN and cuBLAS scratch): CUDA only.
bool kernels_take_workspaces(const KernelTarget& target);

// torch.amp.GradScaler goes with fp16 autocast on CUDA: it scales the loss and unscales the
// gradients before the step.
bool uses_grad_scaler(const KernelTarget& target, Precision precision);

// Non-reentrant activation checkpointing (use_reentrant=False): 2.x stops recomputing a
// module once every tensor its backward needs is back; 1.13 re-runs the whole module.
bool recompute_stops_early(const KernelTarget& target);

}  // namespace trainfit
