#include "pipeline/request.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "graph/device_rules.h"
#include "lower/optimizer_step.h"
#include "sources/calibration/gpu_profile.h"

namespace trainfit {
namespace {

// torchrun and NCCL go further; a plan for more GPUs than this is a typo.
constexpr int kMaxGpus = 4096;
// A baseline batch beyond this (2^30 samples per step) is a typo too.
constexpr int64_t kMaxBaselineBatch = int64_t{1} << 30;

Status check_source(const TrainingRequest& r) {
  TF_RETURN_IF_ERROR(check_model_source(!r.model.empty(), r.trace != nullptr));
  if (r.batch < 1) {
    return invalid_argument(fmt::format("--batch must be at least 1, got {}", r.batch),
                            "use --batch 1 or more");
  }
  if (r.device.target.device == Device::kCpu && r.precision == Precision::kAmpFp16) {
    return unsupported("CPU autocast in PyTorch 1.13 (the cpu profile) takes only bfloat16",
                       "use --precision amp-bf16, or --device-profile cuda for amp-fp16");
  }
  return {};
}

// A trace ran in the precision it was traced in: fp32, or autocast under one device's op lists.
// An autocast trace replays as amp-bf16 or as amp-fp16 (the same two bytes an element, and the
// same lists), the latter with GradScaler's tensors.
Status check_trace_precision(const TrainingRequest& r, const Trace& trace) {
  const Device device = r.device.target.device;
  const std::string_view profile = kDeviceNames.name(device);
  if (!trace.autocast) {
    if (r.precision == Precision::kFp32) return {};
    return unsupported(
        fmt::format("the trace ran in fp32, so --precision {} cannot change it",
                    precision_name(r.precision)),
        fmt::format("trace it under autocast: python3 -m trainfit.trace ... --autocast {}, or "
                    "trainfit.trace(..., autocast=\"{}\")",
                    profile, profile));
  }
  const TraceAutocast& a = *trace.autocast;
  const std::string_view lists = kDeviceNames.name(a.lists);
  if (r.precision != Precision::kAmpBf16 && r.precision != Precision::kAmpFp16) {
    return invalid_argument(
        fmt::format("the trace ran under {} autocast ({}), not --precision {}", lists, a.dtype,
                    precision_name(r.precision)),
        "add --precision amp-bf16 or amp-fp16, or trace again without --autocast");
  }
  if (a.lists != device) {
    return unsupported(
        fmt::format("the trace ran under {}'s autocast lists, which are not the {} profile's",
                    lists, profile),
        fmt::format("trace again with --autocast {}", profile));
  }
  return {};
}

// A trace fixes the model, its inputs and its training recipe; only the batch, the device and
// the optimizer implementation can change.
Status check_trace_request(const TrainingRequest& r, const TraceModel& model) {
  const auto fixed = [](std::string_view flag) {
    return unsupported(fmt::format("{} cannot change a traced model", flag),
                       "trace the model again with that setting, or leave the flag out");
  };
  if (!r.sets.empty()) return fixed("--set");
  if (r.input) return fixed("--input");
  if (r.seq_len) return fixed("--seq-len");
  if (!r.freeze.empty()) return fixed("--freeze");
  if (r.lora) return fixed("--lora");
  TF_RETURN_IF_ERROR(check_trace_precision(r, model.trace));
  if (!r.checkpoint.empty() || r.checkpoint_reentrant) return fixed("--checkpoint");
  if (r.grad_accum != 1) return fixed("--grad-accum");
  if (r.loop != LoopStyle::kHeld) return fixed("--loop");
  if (r.switches.cudnn_benchmark) return fixed("--cudnn-benchmark");
  if (!r.switches.zero_grad_set_to_none) return fixed("--no-zero-grad-set-to-none");
  if (r.weight_decay) return fixed("--weight-decay");
  if (r.gpus != 1 || r.nodes != 1 || r.strategy) {
    return unsupported("--gpus and --strategy apply to zoo models for now",
                       "estimate one GPU from the trace, or use a zoo model");
  }
  const TraceOptimizer& o = model.trace.optimizer;
  if (r.optimizer && o.kind != r.optimizer) {
    return unsupported(
        fmt::format("the trace was recorded with {}, not --optimizer {}", o.type,
                    optimizer_name(*r.optimizer)),
        "trace again with that optimizer (python3 -m trainfit.trace --optimizer ...)");
  }
  return {};
}

// The baseline's batch and learning rate: a batch of samples, a rate that is a number above 0.
Status check_baseline(const TrainingRequest& r) {
  if (r.baseline_batch && (*r.baseline_batch < 1 || *r.baseline_batch > kMaxBaselineBatch)) {
    return invalid_argument(
        fmt::format("--baseline-batch {} is not a batch size", *r.baseline_batch),
        "give the effective batch the paper or config trained with, e.g. --baseline-batch 256");
  }
  if (r.baseline_lr && !(*r.baseline_lr > 0 && std::isfinite(*r.baseline_lr))) {
    return invalid_argument(
        fmt::format("--baseline-lr {:g} is not a learning rate", *r.baseline_lr),
        "give the baseline's learning rate, e.g. --baseline-lr 0.1");
  }
  if (r.baseline_lr && !r.baseline_batch) {
    return invalid_argument("--baseline-lr needs --baseline-batch",
                            "a learning rate is scaled from the batch it was tuned at: add "
                            "--baseline-batch");
  }
  return {};
}

// --gpus, --strategy and DDP's arguments.
Result<DistributedConfig> distributed_config(const TrainingRequest& r) {
  DistributedConfig d;
  if (r.gpus < 1 || r.gpus > kMaxGpus) {
    return invalid_argument(fmt::format("--gpus {} is outside 1 to {}", r.gpus, kMaxGpus),
                            "give the number of GPUs that train together, e.g. --gpus 2");
  }
  if (r.nodes < 1 || r.nodes > kMaxGpus / r.gpus) {
    return invalid_argument(
        fmt::format("--nodes {} is outside 1 to {}", r.nodes, kMaxGpus / r.gpus),
        "give the machines that train together, e.g. --nodes 2");
  }
  if (r.network_gbits) {
    if (r.nodes == 1) {
      return invalid_argument("--network is the link between nodes", "add --nodes M, or drop it");
    }
    if (!(*r.network_gbits > 0 && *r.network_gbits < 1e6)) {
      return invalid_argument(fmt::format("--network {:g} is not a bandwidth", *r.network_gbits),
                              "give the node's network in Gbit/s, e.g. --network 200");
    }
    d.network_gbps = *r.network_gbits / 8;
  }
  d.nodes = r.nodes;
  d.world_size = r.gpus * r.nodes;
  d.strategy = r.strategy.value_or(d.world_size > 1 ? Strategy::kDdp : Strategy::kSingle);
  if (d.strategy == Strategy::kSingle && d.world_size > 1) {
    return invalid_argument("--strategy none cannot spread a step over GPUs",
                            "use --strategy ddp, or --gpus 1");
  }
  const bool reducer = d.strategy == Strategy::kDdp || d.strategy == Strategy::kZero1;
  const bool fsdp = d.strategy == Strategy::kFsdp;
  if (d.strategy != Strategy::kSingle && !reducer && !fsdp) {
    // DeepSpeed's ZeRO-2 and ZeRO-3. FSDP's FULL_SHARD shards as ZeRO-3 does (PyTorch's
    // maintainers on discuss.pytorch.org) and SHARD_GRAD_OP is the one likened to ZeRO-2
    // (Lightning Thunder's FSDPType), so the refusal names them.
    const bool two = d.strategy == Strategy::kZero2;
    return unsupported(
        fmt::format("--strategy {} (DeepSpeed) is not modelled yet", strategy_name(d.strategy)),
        fmt::format("PyTorch's nearest equivalent is: --strategy fsdp{}",
                    two ? " --fsdp-sharding shard_grad_op" : ""));
  }
  if (!fsdp && (!r.fsdp.wrap.empty() || r.fsdp.sharding != FsdpSharding::kFullShard ||
                r.fsdp.mixed_precision_bf16)) {
    return invalid_argument(
        "--fsdp-wrap, --fsdp-sharding and --fsdp-mixed-precision need --strategy fsdp",
        "add --strategy fsdp");
  }
  if (r.fsdp.mixed_precision_bf16 && r.precision != Precision::kFp32) {
    return invalid_argument(
        fmt::format("--fsdp-mixed-precision casts an fp32 model, and --precision is {}",
                    precision_name(r.precision)),
        "drop --precision: FSDP's MixedPrecision replaces autocast");
  }
  d.fsdp = r.fsdp;
  const DdpConfig& ddp = r.ddp;
  const bool ddp_flags = ddp.bucket_cap_bytes || ddp.gradient_as_bucket_view ||
                         ddp.find_unused_parameters || !ddp.broadcast_buffers;
  if (ddp_flags && !reducer) {
    return invalid_argument("DDP's flags need --strategy ddp or zero1 (or --gpus 2 or more)",
                            "add --strategy ddp");
  }
  if (ddp.bucket_cap_bytes && *ddp.bucket_cap_bytes < 1) {
    return invalid_argument("--bucket-cap-mb must be more than 0", "DDP's default is 25");
  }
  d.ddp = ddp;
  return d;
}

// Without an optimizer, the model's own training preset when it has one (LeRobot's policies),
// else AdamW.
Result<TrainingConfig> training_config(const TrainingRequest& r, std::optional<OptimizerKind> kind,
                                       const ModelSpec* model) {
  TrainingConfig c;
  const bool preset = !kind && model != nullptr && model->optimizer.has_value();
  if (preset) {
    c.optimizer.kind = model->optimizer->kind;
    c.optimizer.preset = model->optimizer->doc;
  } else {
    c.optimizer.kind = kind.value_or(OptimizerKind::kAdamW);
  }
  c.optimizer.impl = r.optimizer_impl;
  c.optimizer.step_on_device = r.cuda_default_device && r.device.target.device == Device::kCuda;
  c.optimizer.default_device_mode = r.cuda_default_device;
  const Device device = r.device.target.device;
  if (is_bitsandbytes(c.optimizer.kind)) {
    if (device == Device::kCpu) {
      return unsupported("bitsandbytes' optimizers are modelled for CUDA only",
                         "drop --device-profile cpu, or use adam/adamw");
    }
    if (c.optimizer.impl != OptimizerImpl::kDefault) {
      return invalid_argument(
          "--optimizer-impl does not apply to bitsandbytes' optimizers (one fused kernel per "
          "parameter)",
          "drop --optimizer-impl");
    }
  }
  if (device == Device::kCpu && c.optimizer.impl != OptimizerImpl::kDefault &&
      c.optimizer.impl != OptimizerImpl::kLoop) {
    return unsupported(
        "the cpu profile follows PyTorch 1.13, whose CPU optimizers run the for-loop",
        "use --optimizer-impl loop or default");
  }
  if (r.weight_decay && !(*r.weight_decay >= 0)) {
    return invalid_argument("--weight-decay must be >= 0", "for example --weight-decay 0.01");
  }
  c.optimizer.weight_decay = r.weight_decay.value_or(-1);
  if (preset && !r.weight_decay) c.optimizer.weight_decay = model->optimizer->weight_decay;
  if (r.grad_accum < 1) {
    return invalid_argument("--grad-accum must be at least 1", "use --grad-accum 1 or more");
  }
  c.grad_accum = r.grad_accum;
  if (r.grad_scaler_skips < 0 || r.grad_scaler_skips > 1000000) {
    return invalid_argument("--grad-scaler-skips must be between 0 and 1000000",
                            "for example --grad-scaler-skips 2");
  }
  if (r.grad_scaler_skips > 0 && r.precision != Precision::kAmpFp16) {
    return invalid_argument("--grad-scaler-skips applies to --precision amp-fp16 only",
                            "GradScaler runs with fp16 autocast; drop it or use amp-fp16");
  }
  c.grad_scaler_skips = r.grad_scaler_skips;
  c.switches = r.switches;
  c.loop = r.loop;
  if (r.checkpoint_reentrant && r.checkpoint.empty()) {
    return invalid_argument("--checkpoint-reentrant needs --checkpoint",
                            "name the modules to checkpoint, e.g. --checkpoint 'model.layers.*'");
  }
  c.checkpoint = r.checkpoint;
  c.checkpoint_reentrant = r.checkpoint_reentrant;
  TF_ASSIGN_OR_RETURN(c.distributed, distributed_config(r));
  if (!c.switches.zero_grad_set_to_none && c.distributed.strategy != Strategy::kSingle) {
    return unsupported(
        "--no-zero-grad-set-to-none is modelled on one GPU only, not under DDP or FSDP yet",
        "estimate one GPU, or drop it");
  }
  return c;
}

Status check_margin(double margin) {
  if (!(margin >= 0 && margin <= 0.5)) {
    return invalid_argument(fmt::format("--margin {:g} is outside 0 to 50%", margin),
                            "give a fraction of the GPU's memory, e.g. 0.05 or 5%");
  }
  return {};
}

Result<EstimateOptions> device_options(const TrainingRequest& r) {
  EstimateOptions o;
  o.device = r.device;
  if (r.device.target.device == Device::kCpu) {
    if (r.margin || r.expandable_segments || r.max_split_size_bytes) {
      return invalid_argument("GPU and allocator flags apply to the cuda profile",
                              "drop --device-profile cpu, or the GPU flags");
    }
    return o;
  }
  if (r.margin) {
    TF_RETURN_IF_ERROR(check_margin(*r.margin));
    if (r.device.total_bytes < 0) {
      return invalid_argument("--margin needs a GPU to take it from",
                              "add --gpu NAME (see `trainfit gpus`) or --gpu-memory");
    }
    o.margin_bytes = margin_bytes(r.device.total_bytes, *r.margin);
  }
  o.allocator.expandable_segments = r.expandable_segments;
  if (r.max_split_size_bytes) {
    if (*r.max_split_size_bytes <= kLargeBuffer) {
      return invalid_argument("--max-split-size must be more than 20MiB (PyTorch's minimum)",
                              "for example 128MiB");
    }
    o.allocator.max_split_size = *r.max_split_size_bytes;
  }
  return o;
}

// LoRA's numbers in range, and its targets: peft's default for the model when none are given.
Result<LoraConfig> resolve_lora(const LoraConfig& given, const ModelSpec* spec) {
  LoraConfig lora = given;
  if (lora.rank < 1 || lora.rank > (int64_t{1} << 20)) {
    return invalid_argument(fmt::format("--lora r={} is not a rank", lora.rank),
                            "give the adapters' rank, e.g. --lora r=16");
  }
  if (!std::isfinite(lora.alpha)) {
    return invalid_argument(fmt::format("--lora alpha={:g} is not a number", lora.alpha),
                            "give lora_alpha, e.g. --lora r=16,alpha=32");
  }
  if (!(lora.dropout >= 0 && lora.dropout < 1)) {
    return invalid_argument(fmt::format("--lora dropout={:g} is outside [0, 1)", lora.dropout),
                            "give lora_dropout, e.g. --lora r=16,dropout=0.05");
  }
  // peft makes adapters in fp32 and moves them to the base weight's dtype only when that is a
  // float (_move_adapter_to_device_of_base_layer): over a 4-bit base they stay fp32.
  if (lora.quant != LoraConfig::Quant::kOff) lora.fp32_adapters = true;
  if (lora.prepare && lora.quant == LoraConfig::Quant::kOff) {
    return invalid_argument("--lora prepare=true needs quant=nf4 or quant=fp4",
                            "prepare_model_for_kbit_training prepares a 4-bit model; without one "
                            "its casts make the whole model fp32: give --precision fp32");
  }
  if (lora.target.empty() && spec != nullptr) lora.target = spec->lora_target;
  if (lora.target.empty()) {
    return invalid_argument(
        fmt::format("--lora needs target= for {}: peft has no default target modules for it",
                    spec != nullptr ? spec->name : std::string("this model")),
        "name the Linear modules to adapt, e.g. --lora r=16,target=all-linear");
  }
  return lora;
}

}  // namespace

Status check_quantized_base(const TrainingRequest& r) {
  if (r.strategy == Strategy::kFsdp || r.strategy == Strategy::kZero3) {
    return unsupported("--lora quant= with sharded parameters (FSDP, ZeRO-3) is not modelled yet",
                       "FSDP-QLoRA stores the 4-bit weights as bf16 (bnb_4bit_quant_storage); use "
                       "DDP or one GPU");
  }
  return {};
}

std::string lora_arg(const LoraConfig& lora) {
  std::vector<std::string> items{fmt::format("r={}", lora.rank)};
  const LoraConfig defaults;
  if (lora.alpha != defaults.alpha) items.push_back(fmt::format("alpha={:g}", lora.alpha));
  if (lora.dropout != defaults.dropout) items.push_back(fmt::format("dropout={:g}", lora.dropout));
  if (!lora.target.empty()) items.push_back(fmt::format("target={}", fmt::join(lora.target, ",")));
  if (!lora.fp32_adapters) items.emplace_back("adapter_dtype=base");
  if (lora.quant != LoraConfig::Quant::kOff) {
    items.emplace_back(lora.quant == LoraConfig::Quant::kNf4 ? "quant=nf4" : "quant=fp4");
    if (!lora.double_quant) items.emplace_back("double_quant=false");
  }
  if (lora.prepare) items.emplace_back("prepare=true");
  return fmt::format("{}", fmt::join(items, ","));
}

Status check_model_source(bool model, bool trace, bool hf_config) {
  const int given = int{model} + int{trace} + int{hf_config};
  if (given == 1) return {};
  return invalid_argument(
      given == 0 ? "no model given" : "give one of --model, --hf-config and --trace",
      "give --model NAME (see `trainfit models`), --hf-config config.json or "
      "--trace FILE");
}

Status use_hf_config(TrainingRequest& r, HfModel hf, std::string source) {
  TF_RETURN_IF_ERROR(check_model_source(!r.model.empty(), r.trace != nullptr, true));
  r.model = std::move(hf.model);
  r.hf_sets = hf.sets.size();
  r.sets.insert(r.sets.begin(), hf.sets.begin(), hf.sets.end());
  r.hf_config = std::move(source);
  return {};
}

Result<DeviceProfile> choose_device(const DeviceChoice& c) {
  if (c.profile == Device::kCpu) {
    if (!c.gpu.empty() || c.gpu_memory_bytes || c.cuda_context_bytes || c.gpu_profile || c.link ||
        c.bus_gbps) {
      return invalid_argument("GPU and allocator flags apply to the cuda profile",
                              "drop --device-profile cpu, or the GPU flags");
    }
    return cpu_profile();
  }
  if (!c.gpu.empty() && c.gpu_memory_bytes) {
    return invalid_argument("give --gpu or --gpu-memory, not both",
                            "--gpu-memory is for cards not in `trainfit gpus`");
  }
  std::optional<GpuSpec> gpu;
  if (!c.gpu.empty()) {
    TF_ASSIGN_OR_RETURN(GpuSpec found, find_gpu(c.gpu));
    gpu = found;
  }
  DeviceProfile d = cuda_profile(gpu);
  if (c.gpu_memory_bytes) d.total_bytes = *c.gpu_memory_bytes;
  if (c.cuda_context_bytes) {
    d.context_bytes = *c.cuda_context_bytes;
    d.context_source = ContextSource::kGiven;
  }
  if (c.gpu_profile) TF_RETURN_IF_ERROR(apply_gpu_profile(*c.gpu_profile, d));
  if (c.link || c.bus_gbps) {
    if (!d.timing) {
      return invalid_argument(
          "--link and --bus-bandwidth time the gradients' all-reduce, which "
          "needs a GPU's step time",
          "add --gpu NAME (see `trainfit gpus`)");
    }
    if (c.link) d.timing->link = link_of(*c.link);
    if (c.bus_gbps) {
      if (!(*c.bus_gbps > 0 && *c.bus_gbps < 1e5)) {
        return invalid_argument(fmt::format("--bus-bandwidth {:g} is not a bandwidth", *c.bus_gbps),
                                "give all_reduce_perf's busbw in GB/s, e.g. --bus-bandwidth 20");
      }
      d.timing->link.bus_gbps = *c.bus_gbps;
      d.timing->link.measured = true;
      d.timing->link.source = "your all_reduce_perf figure, --bus-bandwidth";
    }
  }
  return d;
}

Result<ResolvedRequest> resolve(const TrainingRequest& r) {
  TF_RETURN_IF_ERROR(check_source(r));
  ResolvedRequest out;
  out.model.name = r.model;
  out.model.sets = r.sets;
  out.model.batch = r.batch;
  out.model.input = r.input;
  out.model.seq_len = r.seq_len;
  // FSDP's MixedPrecision: the model computes in bf16 (the graph), its shards stay fp32.
  out.model.options.precision = r.fsdp.mixed_precision_bf16 ? Precision::kBf16 : r.precision;
  out.model.options.target = r.device.target;
  out.model.options.memory_format = r.memory_format;
  out.model.options.freeze = r.freeze;
  out.hf_config = r.hf_config;
  if (r.lora && !r.trace) {
    TF_ASSIGN_OR_RETURN(out.model.options.lora, resolve_lora(*r.lora, find_model(r.model)));
    if (out.model.options.lora->quant != LoraConfig::Quant::kOff) {
      TF_RETURN_IF_ERROR(check_quantized_base(r));
    }
  }
  if (const ModelSpec* spec = find_model(r.model); spec != nullptr && !r.checkpoint.empty()) {
    out.model.sets.insert(out.model.sets.end(), spec->checkpoint_sets.begin(),
                          spec->checkpoint_sets.end());
    if (r.checkpoint_reentrant) {
      out.model.sets.insert(out.model.sets.end(), spec->reentrant_sets.begin(),
                            spec->reentrant_sets.end());
    }
  }
  TrainingConfig training;
  if (r.trace) {
    TF_RETURN_IF_ERROR(check_trace_request(r, *r.trace));
    out.trace = r.trace;
    out.model.name = r.trace->trace.model;
    TF_ASSIGN_OR_RETURN(training, training_config(r, std::nullopt, nullptr));
    const TraceOptimizer& o = r.trace->trace.optimizer;
    training.optimizer.kind = o.kind.value_or(OptimizerKind::kAdamW);
    training.trace_grad_scaler = uses_grad_scaler(r.device.target, r.precision);
    if (!o.groups.empty()) training.optimizer.weight_decay = o.groups[0].weight_decay;
    training.optimizer.preset =
        o.kind ? fmt::format("traced {}", o.type)
               : fmt::format("traced {} (not one trainfit models: its step is replayed as traced)",
                             o.type);
  } else {
    TF_ASSIGN_OR_RETURN(training, training_config(r, r.optimizer, find_model(r.model)));
  }
  TF_ASSIGN_OR_RETURN(out.options, device_options(r));
  out.options.training = std::move(training);
  out.options.cost.tf32_matmul = r.tf32;
  out.options.cost.memory_format = r.memory_format;
  if (r.dataset_size && *r.dataset_size < 1) {
    return invalid_argument(
        fmt::format("--dataset-size {} is not a number of samples", *r.dataset_size),
        "give the samples in one epoch, e.g. --dataset-size 50000");
  }
  out.options.dataset_size = r.dataset_size;
  TF_RETURN_IF_ERROR(check_baseline(r));
  out.baseline_batch = r.baseline_batch;
  out.baseline_lr = r.baseline_lr;
  return out;
}

int64_t margin_bytes(int64_t total_bytes, double margin) {
  return static_cast<int64_t>(margin * static_cast<double>(total_bytes));
}

Result<double> parse_margin(std::string_view option, std::string_view text) {
  std::string_view s = text;
  const bool percent = !s.empty() && s.back() == '%';
  if (percent) s.remove_suffix(1);
  const std::optional<double> number = parse_number(s);
  if (!number) {
    return invalid_argument(fmt::format("{} '{}' is not a number", option, text),
                            "give a fraction or a percentage, e.g. 0.05 or 5%");
  }
  double value = *number;
  if (percent) value /= 100;
  if (!(value >= 0 && value <= 0.5)) {
    return invalid_argument(fmt::format("{} '{}' is outside 0 to 50%", option, text),
                            "give a fraction of the GPU's memory, e.g. 0.05 or 5%");
  }
  return value;
}

Result<bool> parse_fsdp_mixed_precision(std::string_view option, std::string_view text) {
  if (text.empty()) return false;
  if (text == "bf16" || text == "bfloat16") return true;
  if (text == "fp16" || text == "float16") {
    return unsupported(fmt::format("{} fp16 is not modelled yet", option),
                       "use bf16 (FSDP's fp16 needs a ShardedGradScaler)");
  }
  return invalid_argument(fmt::format("unknown {} '{}'", option, text), "use bf16");
}

}  // namespace trainfit
