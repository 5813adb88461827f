// TRAINING OPTIONS (optimizer, checkpointing, accumulation) and the device flags shared by the
// commands that estimate memory.
//
//   TrainingFlags t; DeviceFlags d;
//   add_training_flags(app, t); add_device_flags(app, d);
//   Result<TrainingConfig> cfg = to_training_config(t, target, find_model(name));
//   Result<DeviceProfile> dev = to_device_profile(d, target);
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "estimate/estimate.h"
#include "sources/zoo/zoo.h"

namespace trainfit {

struct TrainingFlags {
  std::string optimizer;  // empty: the model's preset, else adamw
  std::string optimizer_impl = "default";
  double weight_decay = -1;
  std::vector<std::string> checkpoint;
  int grad_accum = 1;
};

struct DeviceFlags {
  std::string gpu;
  std::string gpu_memory;
  std::string cuda_context;
  bool expandable_segments = false;
  std::string max_split_size;
  std::string margin;  // fraction of the GPU's memory kept free: "0.05" or "5%"
};

void add_training_flags(CLI::App& app, TrainingFlags& flags);
void add_device_flags(CLI::App& app, DeviceFlags& flags);
// Without --optimizer, the model's own training preset when it has one (LeRobot's policies),
// else AdamW.
Result<TrainingConfig> to_training_config(const TrainingFlags& flags, const KernelTarget& target,
                                          const ModelSpec* model = nullptr);
Result<DeviceProfile> to_device_profile(const DeviceFlags& flags, const KernelTarget& target);
// "0.05" or "5%": a fraction of the GPU's memory, from 0 up to 0.5.
Result<double> parse_margin(std::string_view text);
Result<AllocatorConfig> to_allocator_config(const DeviceFlags& flags);

}  // namespace trainfit
