// The training request: what to estimate, typed. The model (a zoo model with its --set values,
// or a loaded trace), its batch and inputs, how it trains, and on what device. The command line
// builds one from argv, the Python binding from keywords, and the planner copies one and edits
// its fields (a knob is a function on it).
//
//   TrainingRequest r;
//   r.model = "resnet50";
//   r.batch = 64;
//   r.precision = Precision::kAmpBf16;
//   r.device = cuda_profile(*find_gpu("rtx4090"));
//   Result<ResolvedRequest> resolved = resolve(r);   // checked, with the model's presets applied
//   request_args(r);   // request_options.h: --model resnet50 --batch 64 --precision amp-bf16 ...
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "estimate/estimate.h"
#include "sources/calibration/gpu_profile.h"
#include "sources/hf/hf_config.h"
#include "sources/trace/trace_model.h"
#include "sources/zoo/zoo.h"

namespace trainfit {

struct TrainingRequest {
  // The model: a zoo model by name, or a trace (sources/trace load_trace). Exactly one.
  std::string model;
  std::vector<std::pair<std::string, std::string>> sets;  // the zoo model's keys, in order
  std::shared_ptr<const TraceModel> trace;
  std::string trace_source;  // the trace's file, as a command line names it
  // A Hugging Face config.json the model came from: it gave `model` and the first `hf_sets` of
  // `sets` (the --set values after them are the user's).
  std::string hf_config;
  size_t hf_sets = 0;

  int64_t batch = 1;
  std::optional<Dims> input;       // CxHxW of image models; nullopt: the model's default
  std::optional<int64_t> seq_len;  // tokens of sequence models; nullopt: the model's default
  Precision precision = Precision::kFp32;
  std::vector<std::string> freeze;  // parameter-name prefixes that do not train
  std::optional<LoraConfig> lora;   // peft's LoRA on the model's Linear modules

  std::optional<OptimizerKind> optimizer;  // nullopt: the model's training preset, else AdamW
  OptimizerImpl optimizer_impl = OptimizerImpl::kDefault;
  // torch.set_default_device("cuda") in the training script: Adam's step counters are then
  // GPU scalars, which its foreach and for-loop steps read back with .item().
  bool cuda_default_device = false;
  std::optional<double> weight_decay;   // nullopt: the preset's, else torch's default
  std::vector<std::string> checkpoint;  // module patterns under activation checkpointing
  bool checkpoint_reentrant = false;    // use_reentrant=True (transformers' default)
  int grad_accum = 1;                   // micro-batches of `batch` per optimizer step
  int grad_scaler_skips = 0;            // first steps GradScaler skips (fp16 autocast)
  StepSwitches switches;                // cudnn.benchmark, zero_grad(set_to_none=...)
  LoopStyle loop = LoopStyle::kHeld;    // what the training loop keeps of a step
  int gpus = 1;                         // data-parallel ranks per node, `batch` each
  int nodes = 1;                        // of `gpus` each (torchrun --nnodes)
  std::optional<double> network_gbits;  // between nodes, Gbit/s per node
  std::optional<Strategy> strategy;     // nullopt: ddp with more than one GPU
  DdpConfig ddp;                        // DistributedDataParallel's arguments
  FsdpConfig fsdp;                      // FullyShardedDataParallel's
  bool tf32 = false;                    // fp32 matmuls in TF32 (convolutions use it by default)
  MemoryFormat memory_format = MemoryFormat::kChannelsFirst;
  std::optional<int64_t> dataset_size;  // samples per epoch: the epoch time
  // The recipe this run reproduces (a paper's or config's batch and learning rate): the
  // estimate plans the batch and learning rate against it (plan/scaling.h).
  std::optional<int64_t> baseline_batch;
  std::optional<double> baseline_lr;

  // The kernel target, GPU, memory and CUDA context (choose_device builds it from names).
  DeviceProfile device = cuda_profile(std::nullopt);
  std::optional<double> margin;      // share of the GPU's memory kept free; nullopt: the command's
  bool expandable_segments = false;  // PYTORCH_CUDA_ALLOC_CONF settings
  std::optional<int64_t> max_split_size_bytes;  //
};

// Exactly one model source: a zoo model or a trace.
Status check_model_source(bool model, bool trace, bool hf_config = false);

// The model a Hugging Face config.json names (`source`, its path) as the request's model, the
// file's fields as its first --set values (those already given follow them, and win).
Status use_hf_config(TrainingRequest& request, HfModel hf, std::string source);

// The device a user names: the kernel profile, a catalog GPU or a memory size, a CUDA context.
struct DeviceChoice {
  Device profile = Device::kCuda;
  std::string gpu;  // a name from `trainfit gpus`
  std::optional<int64_t> gpu_memory_bytes;
  std::optional<int64_t> cuda_context_bytes;
  // A calibration profile (python3 -m trainfit.calibrate): its constants replace the catalog's.
  std::shared_ptr<const GpuProfile> gpu_profile;
  // Between the GPUs: the link (its measured bus bandwidth), or all_reduce_perf's busbw.
  std::optional<LinkKind> link;
  std::optional<double> bus_gbps;
};
Result<DeviceProfile> choose_device(const DeviceChoice& choice);

// The request checked, with what it leaves to the model filled in: everything an estimate
// needs but the graph.
struct ResolvedRequest {
  ModelRequest model;     // the zoo model to build; with a trace, its name and batch only
  std::string hf_config;  // the config.json it came from, if one
  std::shared_ptr<const TraceModel> trace;
  EstimateOptions options;
  std::optional<int64_t> baseline_batch;  // checked: at least 1
  std::optional<double> baseline_lr;      // checked: positive, and only with a baseline batch
};
Result<ResolvedRequest> resolve(const TrainingRequest& request);

// The margin's bytes on a device of `total_bytes`.
int64_t margin_bytes(int64_t total_bytes, double margin);
// "0.05" or "5%": a share of the GPU's memory, from 0 up to 0.5; `option` names it in errors.
Result<double> parse_margin(std::string_view option, std::string_view text);
// FSDP's MixedPrecision dtype: "" (none) or "bf16" (true); fp16 is refused: FSDP trains it with
// a ShardedGradScaler on a pure-fp16 model, which is not modelled.
Result<bool> parse_fsdp_mixed_precision(std::string_view option, std::string_view text);

// The --lora text that request_options.h's parse_lora reads back, defaults left out
// ("r=16,target=q_proj,v_proj").
std::string lora_arg(const LoraConfig& lora);
// Whether a 4-bit base (--lora quant=) is modelled under the request's precision and strategy:
// the model loaded in its dtype and computing in it, on one GPU or under DDP; else why not.
Status check_quantized_base(const TrainingRequest& r);

}  // namespace trainfit
