// MODEL-SOURCE, TRAINING OPTIONS and the device flags, as typed, and the training request they
// make (pipeline/request.h): the one place argv becomes a request.
//
//   RequestFlags flags;
//   add_request_flags(app, flags);              // --model, --batch, --optimizer, --gpu, ...
//   Result<TrainingRequest> r = to_request(flags);   // after parsing
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/request.h"

namespace trainfit {

struct RequestFlags {
  // MODEL-SOURCE
  std::string model;
  std::string trace;      // a trace file instead of a zoo model
  std::string hf_config;  // a Hugging Face config.json instead of a zoo model
  std::vector<std::string> sets;
  int64_t batch = 1;
  std::string input;
  std::optional<int64_t> seq_len;
  std::string precision = "fp32";
  std::string device_profile = "cuda";
  std::vector<std::string> freeze;
  std::string lora;  // --lora r=16,...
  // TRAINING OPTIONS
  std::string optimizer;  // empty: the model's preset, else adamw
  std::string optimizer_impl = "default";
  std::string default_device = "cpu";
  double weight_decay = -1;  // -1: not given
  std::vector<std::string> checkpoint;
  bool checkpoint_reentrant = false;
  int grad_accum = 1;
  int grad_scaler_skips = 0;
  bool cudnn_benchmark = false;
  std::string loop = "held";
  int gpus = 1;
  std::string strategy;  // empty: ddp with more than one GPU
  std::vector<std::string> fsdp_wrap;
  std::string fsdp_sharding;
  std::string fsdp_mixed_precision;
  std::optional<double> bucket_cap_mb;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  bool no_broadcast_buffers = false;
  int nodes = 1;
  std::optional<double> network;        // --network, Gbit/s
  std::string link;                     // --link
  std::optional<double> bus_bandwidth;  // --bus-bandwidth, GB/s
  bool tf32 = false;
  std::string memory_format = "channels_first";
  std::optional<int64_t> dataset_size;
  std::optional<int64_t> baseline_batch;  // add_baseline_flags
  std::optional<double> baseline_lr;
  // The device.
  std::string gpu;
  std::string gpu_memory;
  std::string gpu_profile;
  std::string cuda_context;
  bool expandable_segments = false;
  std::string max_split_size;
  std::string margin;  // "0.05" or "5%"
};

void add_source_flags(CLI::App& app, RequestFlags& flags);
void add_training_flags(CLI::App& app, RequestFlags& flags);
void add_device_flags(CLI::App& app, RequestFlags& flags);
void add_request_flags(CLI::App& app, RequestFlags& flags);  // all three
// --baseline-batch and --baseline-lr: the recipe a run reproduces (estimate, launch).
void add_baseline_flags(CLI::App& app, RequestFlags& flags);
// The same flags where a later value of an option overrides an earlier one (so that a model's
// own --batch overrides a shared one) and lists add up.
void add_layered_flags(CLI::App& app, RequestFlags& flags);
Result<RequestFlags> parse_layered_flags(const std::vector<std::string>& args);

// Parses the values and reads a --trace file; the library checks the rest (resolve()).
Result<TrainingRequest> to_request(const RequestFlags& flags);

}  // namespace trainfit
