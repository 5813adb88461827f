// The published formulas for ZeRO's model states per GPU: the ZeRO paper's count and DeepSpeed's
// memory estimators. They count parameters, gradients and optimizer state only (no
// activations, temporaries, communication buffers or the allocator's cache), which is what
// trainfit's event replay adds; they are here to compare with and to size sharding where a
// model does not fit one card.
//
//   zero_paper_bytes(7.5e9, ZeroStage::kOsGradParams, 64);   // 1.875e9: the paper's 1.9 GB
//   deepspeed_zero3_gpu_bytes({.params = 2851e6, .largest_layer_params = 32e6, .gpus = 8});
#pragma once

#include <cstdint>

namespace trainfit {

// The ZeRO paper (Rajbhandari et al., SC'20, section 5.1 and figure 1): mixed-precision Adam
// keeps 2 bytes of fp16 parameters and 2 of fp16 gradients per parameter, and K = 12 bytes of
// optimizer state (fp32 parameters, momentum and variance). Stage 1 (P_os) partitions the
// optimizer state over the N data-parallel ranks, stage 2 (P_os+g) the gradients too, stage 3
// (P_os+g+p) the parameters too.
enum class ZeroStage : uint8_t { kNone, kOs, kOsGrad, kOsGradParams };
double zero_paper_bytes(double params, ZeroStage stage, int ranks, double k = 12);

// DeepSpeed's estimate_zero2_model_states_mem_needs and estimate_zero3_model_states_mem_needs
// (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py), GPU and CPU bytes per device, with
// their default additional_buffer_factor of 1.5 on the CPU side.
struct DeepSpeedSetup {
  double params = 0;
  double largest_layer_params = 0;  // ZeRO-3: the module with the most direct parameters
  int gpus = 1;                     // per node
  int nodes = 1;
  bool offload_optimizer = false;
  bool offload_params = false;  // ZeRO-3
  bool zero_init = true;        // ZeRO-3: deepspeed.zero.Init
};
struct DeepSpeedEstimate {
  int64_t gpu_bytes = 0;
  int64_t cpu_bytes = 0;
};
// ZeRO-2 since DeepSpeed PR #5099 (2024): 2 bytes of fp16 parameters on every GPU and 18 per
// parameter partitioned (2 fp16 and 4 fp32 gradient bytes, 4 fp32 parameter and 8 Adam state
// bytes); 2 per parameter with the optimizer offloaded. `legacy`: the formula before it, which
// DeepSpeed's memory.rst still shows (4 + 16/N). The CPU side is the same in both.
DeepSpeedEstimate deepspeed_zero2(const DeepSpeedSetup& s, bool legacy = false);
// ZeRO-3: 4 bytes per parameter of the largest layer (its gathered fp16 parameters and
// gradients) plus 18 per parameter partitioned; 2 partitioned with the optimizer offloaded,
// none with the parameters offloaded too.
DeepSpeedEstimate deepspeed_zero3(const DeepSpeedSetup& s);

}  // namespace trainfit
