// The `trainfit estimate` report as data: what was estimated and the estimate. Renderers turn
// it into text (text.h), JSON (json.h) and the timeline CSV (csv.h).
//
//   Result<EstimateReport> r = make_estimate_report(request, {.explain = true});
//   std::string text = estimate_text(*r);
//   nlohmann::json j = estimate_json(*r);
#pragma once

#include <string>
#include <vector>

#include "pipeline/estimator.h"
#include "plan/scaling.h"
#include "plan/speedups.h"

namespace trainfit {

// What was estimated, for a report's first lines.
struct EstimateHeader {
  std::string model;
  std::string hf_config;  // the config.json the model came from, if one
  std::optional<LoraConfig> lora;
  int64_t batch = 1;
  Precision precision = Precision::kFp32;
  OptimizerConfig optimizer;
  OptimizerImpl resolved_impl = OptimizerImpl::kLoop;
  DeviceProfile device;
  TrainingConfig training;
  CostOptions cost;
  std::optional<int64_t> dataset_size;
  std::vector<std::string> notes;  // caveats about this estimate, one sentence each
};
EstimateHeader header_of(const ResolvedRequest& resolved);

// The model as a title names it: "llama" or "llama (llama-3-8b.json)".
std::string model_title(const EstimateHeader& header);
// "LoRA r=16, alpha 32, dropout 0.05 on q_proj, v_proj"
std::string lora_label(const LoraConfig& lora);

// "adamw (foreach), weight_decay 0.0001, 4 micro-batches per step"
std::string optimizer_line(const EstimateHeader& header);
// "fp32", "amp-bf16", ...; under FSDP's MixedPrecision, what it computes in and what it keeps.
std::string_view precision_label(const EstimateHeader& header);
// "DDP", "DDP with ZeroRedundancyOptimizer", "FSDP (full_shard)": the strategy of a run on
// more than one GPU.
std::string strategy_label(const DistributedConfig& distributed);
// The implementation as reports name it: "foreach", or "bitsandbytes" for 8-bit state.
std::string_view impl_label(const EstimateHeader& header);

// One event, with the op and module it happened in, and allocated and reserved bytes after it.
struct TimelineRow {
  int iteration = 0;  // from 1
  Phase phase = Phase::kSetup;
  std::string module;
  std::string op;
  bool alloc = true;
  bool empty_cache = false;  // torch.cuda.empty_cache() (cuDNN benchmark mode)
  Category category = Category::kTemporary;
  int64_t bytes = 0;  // requested (alloc) or given back (free), before rounding
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
};

struct EstimateReport {
  EstimateHeader header;
  Estimate estimate;
  std::vector<TimelineRow> timeline;  // with EstimateDetail::timeline
  // Batch and learning rate over GPUs: with --gpus 2 or more, or a baseline.
  std::optional<ScalingPlan> scaling;
  std::vector<Speedup> speedups;  // with a step time: what would shorten it
};

Result<EstimateReport> make_estimate_report(const TrainingRequest& request,
                                            const EstimateDetail& detail = {});

}  // namespace trainfit
