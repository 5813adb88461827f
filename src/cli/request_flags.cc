#include "cli/request_flags.h"

#include <fmt/format.h>

#include "cli/input_files.h"

namespace trainfit {

void add_source_flags(CLI::App& app, RequestFlags& f) {
  app.add_option("--model", f.model, "zoo model name (see `trainfit models`)");
  app.add_option("--trace", f.trace,
                 "a trace of your own model, written by `python3 -m trainfit.trace` "
                 "(instead of --model)");
  app.add_option("--hf-config", f.hf_config,
                 "a Hugging Face model's config.json, read offline (instead of --model): Llama, "
                 "Mistral, Qwen2, Qwen3, Gemma 1 to 3, Phi-3 and Mixtral decoders; --set keys "
                 "apply on top");
  app.add_option("--set", f.sets, "model key=value, repeatable (see `trainfit models`)");
  app.add_option("--batch", f.batch, "batch size")->capture_default_str();
  app.add_option("--input", f.input, "image size CxHxW (image models), e.g. 3x224x224");
  app.add_option("--seq-len", f.seq_len, "tokens per sequence (sequence models)");
  app.add_option("--precision", f.precision,
                 "fp32 | amp-fp16 | amp-bf16 | bf16 (a trace: the one it was traced in; "
                 "amp-fp16 or amp-bf16 for one traced with --autocast)")
      ->capture_default_str();
  app.add_option("--device-profile", f.device_profile,
                 "cuda (PyTorch 2.x CUDA kernels) | cpu (PyTorch 1.13 CPU kernels, for checking "
                 "against CPU PyTorch)")
      ->capture_default_str();
  app.add_option("--freeze", f.freeze,
                 "parameter-name prefix that does not train, repeatable (e.g. layer1)");
  app.add_option("--lora", f.lora,
                 "LoRA as peft adds it, LoraConfig's fields: r=16,alpha=32,dropout=0.05,"
                 "target=q_proj,k_proj,v_proj,o_proj (module names, or all-linear; default: "
                 "peft's for the model, q_proj,v_proj for decoders), adapter_dtype=fp32 (peft's "
                 "default) or base; only the adapters train. QLoRA: quant=nf4 (or fp4) loads every "
                 "Linear but lm_head in 4 bits as bitsandbytes does, double_quant=true (default) "
                 "or false; the base computes in --precision's dtype (give bf16); prepare=true: "
                 "peft's prepare_model_for_kbit_training first (the other parameters in fp32)");
}

void add_training_flags(CLI::App& app, RequestFlags& f) {
  app.add_option("--optimizer", f.optimizer,
                 "sgd | momentum (SGD, momentum 0.9) | adam | adamw | adam8bit | adamw8bit "
                 "(bitsandbytes' 8-bit state) | paged_adamw | paged_adamw8bit (bitsandbytes' "
                 "paged state: unified memory outside PyTorch's allocator); default: the model's "
                 "training preset (LeRobot's ACT: adamw, Diffusion: adam), else adamw");
  app.add_option(
         "--optimizer-impl", f.optimizer_impl,
         "default (PyTorch's choice: foreach on CUDA, for-loop on CPU) | foreach | fused | loop")
      ->capture_default_str();
  app.add_option("--default-device", f.default_device,
                 "cpu | cuda: where the training script's tensors made without a device go "
                 "(torch.set_default_device). Under cuda Adam's step counters are GPU scalars, "
                 "and its foreach step reads each back twice with .item() (the for-loop "
                 "once), each read a wait for the GPU")
      ->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay,
                 "weight decay (default: torch's, 0.01 for adamw, else 0)");
  app.add_option("--checkpoint", f.checkpoint,
                 "module pattern run under activation checkpointing (non-reentrant), repeatable; "
                 "'*' matches one path component, e.g. 'layer3' or 'encoder.layers.*'");
  app.add_flag("--checkpoint-reentrant", f.checkpoint_reentrant,
               "run --checkpoint modules under torch.utils.checkpoint(use_reentrant=True), "
               "transformers' default for gradient_checkpointing_enable(); decoders then make "
               "their input embeddings require grad, as peft's enable_input_require_grads does");
  app.add_option("--grad-accum", f.grad_accum, "micro-batches of --batch per optimizer step")
      ->capture_default_str();
  app.add_option("--grad-scaler-skips", f.grad_scaler_skips,
                 "with amp-fp16: the first N optimizer steps GradScaler skips (inf gradients at "
                 "its initial scale: no update, no optimizer state yet); to compare with a "
                 "measurement of a run's first iterations")
      ->capture_default_str();
  app.add_option("--loop", f.loop,
                 "held | scoped: what the training loop keeps of a step. held: `for x, y in "
                 "loader: out = model(x); loss = ...` holds the batch, the output and the loss to "
                 "the step's end; scoped: a step function makes the batch and returns the loss, "
                 "so the batch and the output go when it returns (or when autograd lets go)")
      ->capture_default_str();
  app.add_flag("--cudnn-benchmark", f.cudnn_benchmark,
               "torch.backends.cudnn.benchmark = True: the first iteration times every cuDNN "
               "plan of each convolution, each with its workspace, then empties the cache");
  app.add_flag("--tf32", f.tf32,
               "fp32 matmuls in TF32 (torch.backends.cuda.matmul.allow_tf32, off by default); "
               "convolutions use TF32 by default (cudnn.allow_tf32)");
  app.add_option("--memory-format", f.memory_format,
                 "channels_first | channels_last (model and inputs .to(memory_format="
                 "torch.channels_last)): the step time of convolutions under AMP")
      ->capture_default_str();
  app.add_option("--dataset-size", f.dataset_size, "samples in one epoch: adds the epoch time");
  app.add_option("--gpus", f.gpus,
                 "GPUs training together, --batch each; memory figures are one rank's")
      ->capture_default_str();
  app.add_option("--strategy", f.strategy,
                 "ddp (DistributedDataParallel; the default with --gpus 2 or more), zero1 (DDP "
                 "with torch's ZeroRedundancyOptimizer: optimizer state sharded), fsdp "
                 "(FullyShardedDataParallel: parameters, gradients and optimizer state sharded); "
                 "zero2 and zero3 are refused until they are modelled");
  app.add_option("--fsdp-wrap", f.fsdp_wrap,
                 "FSDP: module pattern wrapped as its own unit (auto_wrap_policy), repeatable or "
                 "comma-separated, e.g. 'encoder.layers.*' or 'layer1,layer2'; without it the "
                 "whole model is one unit")
      ->delimiter(',');
  app.add_option("--fsdp-sharding", f.fsdp_sharding,
                 "FSDP's sharding_strategy: full_shard (the default: parameters regathered for "
                 "backward) or shard_grad_op (kept from forward to backward)");
  app.add_option("--fsdp-mixed-precision", f.fsdp_mixed_precision,
                 "FSDP: bf16 for MixedPrecision(param_dtype, reduce_dtype and buffer_dtype = "
                 "torch.bfloat16) on an fp32 model: shards and optimizer state stay fp32, the "
                 "model computes in bf16");
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "DDP's bucket_cap_mb (default 25)");
  app.add_flag("--gradient-as-bucket-view", f.gradient_as_bucket_view,
               "DDP(gradient_as_bucket_view=True): .grad lives in the buckets, saving one copy "
               "of the gradients");
  app.add_flag("--find-unused-parameters", f.find_unused_parameters,
               "DDP(find_unused_parameters=True): buckets stay in parameter order");
  app.add_flag("--no-broadcast-buffers", f.no_broadcast_buffers,
               "DDP(broadcast_buffers=False): no flat copy of the buffers each forward");
  app.add_option("--nodes", f.nodes,
                 "machines of --gpus GPUs each (torchrun --nnodes): the world size is GPUs x "
                 "nodes, and the all-reduce crosses --network")
      ->capture_default_str();
  app.add_option("--network", f.network,
                 "bandwidth between nodes in Gbit/s per node (default 100: one 100 GbE NIC); with "
                 "several NICs give their total, e.g. 800 for 4 x 200 Gb/s InfiniBand");
  app.add_option("--link", f.link,
                 "what connects the GPUs: pcie3, pcie4, pcie5, nvlink2, nvlink3 or nvlink4 "
                 "(default: the GPU's usual one); sets the all-reduce's bus bandwidth");
  app.add_option("--bus-bandwidth", f.bus_bandwidth,
                 "the all-reduce bus bandwidth in GB/s, as nccl-tests' all_reduce_perf prints "
                 "it (busbw at 128 MiB or more): replaces the link's figure");
}

void add_baseline_flags(CLI::App& app, RequestFlags& f) {
  app.add_option("--baseline-batch", f.baseline_batch,
                 "the effective batch the paper or config trained with: compared with --batch x "
                 "--gpus x --grad-accum, with what reaches it");
  app.add_option("--baseline-lr", f.baseline_lr,
                 "its learning rate: scaled to this run's effective batch (linear for SGD, "
                 "square root for Adam)");
}

void add_device_flags(CLI::App& app, RequestFlags& f) {
  app.add_option("--gpu", f.gpu,
                 "GPU from the catalog (see `trainfit gpus`): decides fit and headroom");
  app.add_option("--gpu-memory", f.gpu_memory, "memory of a GPU not in the catalog, e.g. 24GiB");
  app.add_option("--gpu-profile", f.gpu_profile,
                 "step-time constants measured on your GPU (python3 -m trainfit.calibrate --out "
                 "FILE); with --gpu the card it was measured on, without it that card's memory");
  app.add_option(
      "--cuda-context", f.cuda_context,
      "memory outside PyTorch's allocator (context, kernels, library handles); default 500MiB");
  app.add_flag("--expandable-segments", f.expandable_segments,
               "model PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
  app.add_option("--margin", f.margin,
                 "fraction of the GPU's memory to keep free when deciding fit, e.g. 0.05 or 5% "
                 "(default 0 for estimate, 5% for fit)");
  app.add_option("--max-split-size", f.max_split_size,
                 "model PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb (e.g. 128MiB)");
}

void add_request_flags(CLI::App& app, RequestFlags& flags) {
  add_source_flags(app, flags);
  add_training_flags(app, flags);
  add_device_flags(app, flags);
}

void add_layered_flags(CLI::App& app, RequestFlags& flags) {
  add_request_flags(app, flags);
  for (CLI::Option* o : app.get_options()) {
    if (o->get_items_expected_max() == 1) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
}

Result<RequestFlags> parse_layered_flags(const std::vector<std::string>& args) {
  CLI::App app{"", "trainfit"};
  RequestFlags flags;
  add_layered_flags(app, flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return invalid_argument(e.what());
  }
  return flags;
}

namespace {

// An empty flag is not given.
Result<std::optional<int64_t>> optional_size(std::string_view flag, const std::string& text) {
  if (text.empty()) return std::optional<int64_t>();
  TF_ASSIGN_OR_RETURN(const int64_t bytes, parse_size(flag, text));
  return std::optional<int64_t>(bytes);
}

Status to_source(const RequestFlags& f, TrainingRequest& r) {
  TF_RETURN_IF_ERROR(check_model_source(!f.model.empty(), !f.trace.empty(), !f.hf_config.empty()));
  r.model = f.model;
  r.batch = f.batch;
  if (!f.hf_config.empty()) {
    TF_ASSIGN_OR_RETURN(HfModel hf, read_hf_config_file(f.hf_config));
    TF_RETURN_IF_ERROR(use_hf_config(r, std::move(hf), f.hf_config));
  }
  for (const std::string& s : f.sets) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      return invalid_argument(fmt::format("--set '{}' is not key=value", s),
                              "for example --set num_classes=10");
    }
    r.sets.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  if (!f.input.empty()) {
    Result<Dims> dims = parse_dims(f.input);
    if (!dims.ok()) {
      return invalid_argument(fmt::format("--input '{}': {}", f.input, dims.status().message()),
                              "use CxHxW, for example 3x224x224");
    }
    r.input = *dims;
  }
  r.seq_len = f.seq_len;
  TF_ASSIGN_OR_RETURN(r.precision, parse_enum(kPrecisionNames, "--precision", f.precision));
  TF_ASSIGN_OR_RETURN(const Device profile,
                      parse_enum(kDeviceNames, "--device-profile", f.device_profile));
  r.device.target = profile == Device::kCpu ? cpu_profile().target : cuda_profile({}).target;
  r.freeze = f.freeze;
  if (!f.lora.empty()) {
    TF_ASSIGN_OR_RETURN(r.lora, parse_lora(f.lora));
  }
  if (!f.trace.empty()) {
    TF_ASSIGN_OR_RETURN(r.trace, read_trace_file(f.trace));
    r.trace_source = f.trace;
  }
  return {};
}

Status to_training(const RequestFlags& f, TrainingRequest& r) {
  if (!f.optimizer.empty()) {
    TF_ASSIGN_OR_RETURN(r.optimizer, parse_enum(kOptimizerNames, "--optimizer", f.optimizer));
  }
  TF_ASSIGN_OR_RETURN(r.optimizer_impl,
                      parse_enum(kOptimizerImplNames, "--optimizer-impl", f.optimizer_impl));
  if (f.default_device != "cpu" && f.default_device != "cuda") {
    return invalid_argument(fmt::format("--default-device {} is not a device", f.default_device),
                            "give cpu (tensors made without a device stay on the host) or cuda");
  }
  r.cuda_default_device = f.default_device == "cuda";
  if (f.weight_decay != -1) r.weight_decay = f.weight_decay;
  r.checkpoint = f.checkpoint;
  r.checkpoint_reentrant = f.checkpoint_reentrant;
  r.grad_accum = f.grad_accum;
  r.grad_scaler_skips = f.grad_scaler_skips;
  r.cudnn_benchmark = f.cudnn_benchmark;
  TF_ASSIGN_OR_RETURN(r.loop, parse_enum(kLoopStyleNames, "--loop", f.loop));
  r.tf32 = f.tf32;
  TF_ASSIGN_OR_RETURN(r.memory_format,
                      parse_enum(kMemoryFormatNames, "--memory-format", f.memory_format));
  r.dataset_size = f.dataset_size;
  r.baseline_batch = f.baseline_batch;
  r.baseline_lr = f.baseline_lr;
  r.gpus = f.gpus;
  r.nodes = f.nodes;
  r.network_gbits = f.network;
  if (!f.strategy.empty()) {
    TF_ASSIGN_OR_RETURN(r.strategy, parse_enum(kStrategyNames, "--strategy", f.strategy));
  }
  if (f.bucket_cap_mb) {
    if (!(*f.bucket_cap_mb > 0 && *f.bucket_cap_mb < 1e9)) {
      return invalid_argument(fmt::format("--bucket-cap-mb {:g} is not a size", *f.bucket_cap_mb),
                              "DDP's default is 25 (MiB)");
    }
    // DDP: int(bucket_cap_mb * 1024 * 1024).
    r.ddp.bucket_cap_bytes = static_cast<int64_t>(*f.bucket_cap_mb * 1024 * 1024);
  }
  r.ddp.gradient_as_bucket_view = f.gradient_as_bucket_view;
  r.fsdp.wrap = f.fsdp_wrap;
  if (!f.fsdp_sharding.empty()) {
    TF_ASSIGN_OR_RETURN(r.fsdp.sharding,
                        parse_enum(kFsdpShardingNames, "--fsdp-sharding", f.fsdp_sharding));
  }
  TF_ASSIGN_OR_RETURN(r.fsdp.mixed_precision_bf16,
                      parse_fsdp_mixed_precision("--fsdp-mixed-precision", f.fsdp_mixed_precision));
  r.ddp.find_unused_parameters = f.find_unused_parameters;
  r.ddp.broadcast_buffers = !f.no_broadcast_buffers;
  return {};
}

Status to_device(const RequestFlags& f, TrainingRequest& r) {
  DeviceChoice choice;
  choice.profile = r.device.target.device;
  if (choice.profile == Device::kCpu &&
      (!f.gpu.empty() || !f.gpu_memory.empty() || !f.cuda_context.empty() ||
       !f.gpu_profile.empty() || f.expandable_segments || !f.max_split_size.empty() ||
       !f.margin.empty() || !f.link.empty() || f.bus_bandwidth)) {
    return invalid_argument("GPU and allocator flags apply to the cuda profile",
                            "drop --device-profile cpu, or the GPU flags");
  }
  choice.gpu = f.gpu;
  if (!f.link.empty()) {
    TF_ASSIGN_OR_RETURN(choice.link, parse_enum(kLinkNames, "--link", f.link));
  }
  choice.bus_gbps = f.bus_bandwidth;
  if (!f.gpu_profile.empty()) {
    TF_ASSIGN_OR_RETURN(choice.gpu_profile, read_gpu_profile_file(f.gpu_profile));
  }
  TF_ASSIGN_OR_RETURN(choice.gpu_memory_bytes, optional_size("--gpu-memory", f.gpu_memory));
  TF_ASSIGN_OR_RETURN(choice.cuda_context_bytes, optional_size("--cuda-context", f.cuda_context));
  TF_ASSIGN_OR_RETURN(r.device, choose_device(choice));
  if (!f.margin.empty()) {
    TF_ASSIGN_OR_RETURN(r.margin, parse_margin("--margin", f.margin));
  }
  r.expandable_segments = f.expandable_segments;
  TF_ASSIGN_OR_RETURN(r.max_split_size_bytes, optional_size("--max-split-size", f.max_split_size));
  return {};
}

}  // namespace

Result<TrainingRequest> to_request(const RequestFlags& flags) {
  TrainingRequest r;
  TF_RETURN_IF_ERROR(to_source(flags, r));
  TF_RETURN_IF_ERROR(to_training(flags, r));
  TF_RETURN_IF_ERROR(to_device(flags, r));
  return r;
}

}  // namespace trainfit
