#include "cli/training_options.h"

#include <fmt/format.h>

#include "lower/optimizer_step.h"

namespace trainfit {

void add_training_flags(CLI::App& app, TrainingFlags& f) {
  app.add_option("--optimizer", f.optimizer,
                 "sgd | momentum (SGD, momentum 0.9) | adam | adamw | adam8bit | adamw8bit "
                 "(bitsandbytes' 8-bit state); default: the model's "
                 "training preset (LeRobot's ACT: adamw, Diffusion: adam), else adamw");
  app.add_option(
         "--optimizer-impl", f.optimizer_impl,
         "default (PyTorch's choice: foreach on CUDA, for-loop on CPU) | foreach | fused | loop")
      ->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay,
                 "weight decay (default: torch's, 0.01 for adamw, else 0)");
  app.add_option("--checkpoint", f.checkpoint,
                 "module pattern run under activation checkpointing (non-reentrant), repeatable; "
                 "'*' matches one path component, e.g. 'layer3' or 'encoder.layers.*'");
  app.add_option("--grad-accum", f.grad_accum, "micro-batches of --batch per optimizer step")
      ->capture_default_str();
}

void add_device_flags(CLI::App& app, DeviceFlags& f) {
  app.add_option("--gpu", f.gpu,
                 "GPU from the catalog (see `trainfit gpus`): decides fit and headroom");
  app.add_option("--gpu-memory", f.gpu_memory, "memory of a GPU not in the catalog, e.g. 24GiB");
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

Result<TrainingConfig> to_training_config(const TrainingFlags& f, const KernelTarget& target,
                                          const ModelSpec* model) {
  TrainingConfig c;
  const bool preset = f.optimizer.empty() && model != nullptr && model->optimizer.has_value();
  if (preset) {
    c.optimizer.kind = model->optimizer->kind;
    c.optimizer.preset = model->optimizer->doc;
  } else if (f.optimizer.empty() || f.optimizer == "adamw") {
    c.optimizer.kind = OptimizerKind::kAdamW;
  } else if (f.optimizer == "sgd") {
    c.optimizer.kind = OptimizerKind::kSgd;
  } else if (f.optimizer == "momentum") {
    c.optimizer.kind = OptimizerKind::kMomentum;
  } else if (f.optimizer == "adam") {
    c.optimizer.kind = OptimizerKind::kAdam;
  } else if (f.optimizer == "adam8bit") {
    c.optimizer.kind = OptimizerKind::kAdam8bit;
  } else if (f.optimizer == "adamw8bit") {
    c.optimizer.kind = OptimizerKind::kAdamW8bit;
  } else {
    return invalid_argument(fmt::format("unknown --optimizer '{}'", f.optimizer),
                            "use sgd, momentum, adam, adamw, adam8bit or adamw8bit");
  }
  if (f.optimizer_impl == "default")
    c.optimizer.impl = OptimizerImpl::kDefault;
  else if (f.optimizer_impl == "foreach")
    c.optimizer.impl = OptimizerImpl::kForeach;
  else if (f.optimizer_impl == "fused")
    c.optimizer.impl = OptimizerImpl::kFused;
  else if (f.optimizer_impl == "loop")
    c.optimizer.impl = OptimizerImpl::kLoop;
  else {
    return invalid_argument(fmt::format("unknown --optimizer-impl '{}'", f.optimizer_impl),
                            "use default, foreach, fused or loop");
  }
  if (is_8bit(c.optimizer.kind)) {
    if (target.device == Device::kCpu) {
      return unsupported("bitsandbytes' 8-bit optimizers are modelled for CUDA only",
                         "drop --device-profile cpu, or use adam/adamw");
    }
    if (c.optimizer.impl != OptimizerImpl::kDefault) {
      return invalid_argument(
          "--optimizer-impl does not apply to bitsandbytes' 8-bit optimizers (one fused kernel "
          "per parameter)",
          "drop --optimizer-impl");
    }
  }
  if (target.device == Device::kCpu && c.optimizer.impl != OptimizerImpl::kDefault &&
      c.optimizer.impl != OptimizerImpl::kLoop) {
    return unsupported(
        "the cpu profile follows PyTorch 1.13, whose CPU optimizers run the for-loop",
        "use --optimizer-impl loop or default");
  }
  if (f.weight_decay < 0 && f.weight_decay != -1) {
    return invalid_argument("--weight-decay must be >= 0", "for example --weight-decay 0.01");
  }
  c.optimizer.weight_decay = f.weight_decay;
  if (preset && f.weight_decay == -1) c.optimizer.weight_decay = model->optimizer->weight_decay;
  if (f.grad_accum < 1)
    return invalid_argument("--grad-accum must be at least 1", "use --grad-accum 1 or more");
  c.grad_accum = f.grad_accum;
  c.checkpoint = f.checkpoint;
  return c;
}

Result<DeviceProfile> to_device_profile(const DeviceFlags& f, const KernelTarget& target) {
  if (target.device == Device::kCpu) {
    if (!f.gpu.empty() || !f.gpu_memory.empty() || !f.cuda_context.empty() ||
        f.expandable_segments || !f.max_split_size.empty() || !f.margin.empty()) {
      return invalid_argument("GPU and allocator flags apply to the cuda profile",
                              "drop --device-profile cpu, or the GPU flags");
    }
    return cpu_profile();
  }
  if (!f.gpu.empty() && !f.gpu_memory.empty()) {
    return invalid_argument("give --gpu or --gpu-memory, not both",
                            "--gpu-memory is for cards not in `trainfit gpus`");
  }
  std::optional<GpuSpec> gpu;
  if (!f.gpu.empty()) {
    TF_ASSIGN_OR_RETURN(GpuSpec found, find_gpu(f.gpu));
    gpu = found;
  }
  DeviceProfile d = cuda_profile(gpu);
  if (!f.gpu_memory.empty()) {
    Result<int64_t> bytes = parse_bytes(f.gpu_memory);
    if (!bytes.ok()) return bytes.status().with_context("--gpu-memory");
    d.total_bytes = *bytes;
  }
  if (!f.cuda_context.empty()) {
    Result<int64_t> bytes = parse_bytes(f.cuda_context);
    if (!bytes.ok()) return bytes.status().with_context("--cuda-context");
    d.context_bytes = *bytes;
  }
  if (!f.margin.empty()) {
    TF_ASSIGN_OR_RETURN(const double fraction, parse_margin(f.margin));
    if (d.total_bytes < 0) {
      return invalid_argument("--margin needs a GPU to take it from",
                              "add --gpu NAME (see `trainfit gpus`) or --gpu-memory");
    }
    d.margin_bytes = static_cast<int64_t>(fraction * static_cast<double>(d.total_bytes));
  }
  return d;
}

Result<double> parse_margin(std::string_view text) {
  std::string s(text);
  const bool percent = !s.empty() && s.back() == '%';
  if (percent) s.pop_back();
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) {
    return invalid_argument(fmt::format("--margin '{}' is not a number", text),
                            "give a fraction or a percentage, e.g. 0.05 or 5%");
  }
  if (percent) value /= 100;
  if (!(value >= 0 && value <= 0.5)) {
    return invalid_argument(fmt::format("--margin '{}' is outside 0 to 50%", text),
                            "give a fraction of the GPU's memory, e.g. 0.05 or 5%");
  }
  return value;
}

Result<AllocatorConfig> to_allocator_config(const DeviceFlags& f) {
  AllocatorConfig a;
  a.expandable_segments = f.expandable_segments;
  if (!f.max_split_size.empty()) {
    Result<int64_t> bytes = parse_bytes(f.max_split_size);
    if (!bytes.ok()) return bytes.status().with_context("--max-split-size");
    if (*bytes <= kLargeBuffer) {
      return invalid_argument("--max-split-size must be more than 20MiB (PyTorch's minimum)",
                              "for example 128MiB");
    }
    a.max_split_size = *bytes;
  }
  return a;
}

}  // namespace trainfit
