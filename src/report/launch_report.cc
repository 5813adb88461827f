#include "report/launch_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/check.h"

namespace trainfit {
namespace {

std::string optimizer_class(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdam:
      return "torch.optim.Adam";
    case OptimizerKind::kAdamW:
      return "torch.optim.AdamW";
    case OptimizerKind::kSgd:
    case OptimizerKind::kMomentum:
      return "torch.optim.SGD";
    case OptimizerKind::kAdam8bit:
      return "bitsandbytes.optim.Adam8bit";
    case OptimizerKind::kAdamW8bit:
      return "bitsandbytes.optim.AdamW8bit";
    case OptimizerKind::kPagedAdamW:
      return "bitsandbytes.optim.PagedAdamW";
    case OptimizerKind::kPagedAdamW8bit:
      return "bitsandbytes.optim.PagedAdamW8bit";
  }
  return "your optimizer's class";
}

// What a single-GPU training script changes to run this plan (seed 003's list, with the
// numbers).
std::vector<std::string> code_changes(const LaunchReport& r, const EstimateReport& chosen) {
  const LaunchCandidate& c = r.plan.candidates[*r.plan.fastest];
  const ScalingPlan& s = *chosen.scaling;
  std::vector<std::string> out;
  if (c.gpus > 1) {
    out.emplace_back(
        "dist.init_process_group(\"nccl\"); local_rank = int(os.environ[\"LOCAL_RANK\"]); "
        "torch.cuda.set_device(local_rank) (torchrun sets RANK, LOCAL_RANK and WORLD_SIZE)");
    for (const ScalingWarning& w : s.warnings) {
      if (w.code == "batchnorm_small_batch") out.push_back(w.fix);
    }
    if (c.strategy == Strategy::kFsdp) {
      const FsdpConfig& fsdp = c.request.fsdp;
      const bool units = !fsdp.wrap.empty() && !r.fsdp.classes.empty();
      const std::string mixed =
          fsdp.mixed_precision_bf16
              ? ", mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, "
                "reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16)"
              : "";
      out.push_back(fmt::format(
          "model = FullyShardedDataParallel(model, device_id=local_rank{}{}) ({}), then make the "
          "optimizer from model.parameters()",
          units ? fmt::format(", auto_wrap_policy=ModuleWrapPolicy({{{}}})",
                              fmt::join(r.fsdp.classes, ", "))
                : "",
          mixed,
          units ? fmt::format("each {} its own unit: {}", fmt::join(r.fsdp.classes, " or "),
                              fmt::join(fsdp.wrap, ", "))
                : "the whole model one unit"));
    } else {
      std::string ddp = "model = DistributedDataParallel(model, device_ids=[local_rank]";
      if (r.plan.request.ddp.gradient_as_bucket_view) ddp += ", gradient_as_bucket_view=True";
      out.push_back(ddp + ")");
    }
    if (c.strategy == Strategy::kZero1) {
      out.push_back(fmt::format(
          "optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class={}, ...) "
          "(torch.distributed.optim), with the optimizer's own arguments",
          optimizer_class(chosen.header.optimizer.kind)));
    }
    out.push_back(fmt::format(
        "sampler = DistributedSampler(dataset, shuffle=True); DataLoader(dataset, "
        "batch_size={}, sampler=sampler); sampler.set_epoch(epoch) at the start of every epoch",
        c.per_gpu_batch));
  } else {
    out.push_back(fmt::format("DataLoader(dataset, batch_size={}, shuffle=True)", c.per_gpu_batch));
  }
  if (c.grad_accum > 1) {
    out.push_back(fmt::format(
        "accumulate {} micro-batches per optimizer step: divide the loss by {}{}", c.grad_accum,
        c.grad_accum,
        c.gpus == 1 ? ""
        : c.strategy == Strategy::kFsdp
            ? " (FSDP's no_sync() would keep every unit's full gradient: not used here)"
            : ", and run the first backward passes under model.no_sync() so that only the last "
              "all-reduces"));
  }
  if (c.gpus > 1) {
    out.emplace_back(
        c.strategy == Strategy::kFsdp
            ? "evaluation: sum the loss and the sample count on each rank and dist.all_reduce "
              "both before dividing; save checkpoints under FSDP.state_dict_type(model, "
              "StateDictType.FULL_STATE_DICT), from rank 0"
            : "evaluation: sum the loss and the sample count on each rank and dist.all_reduce "
              "both before dividing; save checkpoints from rank 0 only "
              "(model.module.state_dict())");
  }
  return out;
}

}  // namespace

Result<LaunchReport> make_launch_report(const TrainingRequest& request,
                                        const LaunchOptions& options) {
  LaunchReport r;
  r.options = options;
  if (request.nodes != 1) {
    return unsupported("launch plans the GPUs of one node", "drop --nodes");
  }
  if (!request.device.timing) {
    return invalid_argument("launch ranks plans by step time, which needs a catalog GPU",
                            "name one with --gpu (see `trainfit gpus`)");
  }
  TF_ASSIGN_OR_RETURN(const ResolvedRequest resolved, resolve(request));
  r.model = resolved.model.name;
  r.gpu = request.device.gpu_display;
  r.link = request.device.timing->link;
  // FSDP over the model's blocks, or the units asked for with --strategy fsdp (1.13 cannot
  // flatten frozen and trained parameters into one unit, so not tried with --freeze).
  std::optional<std::vector<std::string>> fsdp_wrap;
  if (request.strategy == Strategy::kFsdp ||
      (options.max_gpus > 1 && request.freeze.empty() && !request.strategy)) {
    TF_ASSIGN_OR_RETURN(r.fsdp, fsdp_blocks(resolved));
    if (!request.strategy) fsdp_wrap = r.fsdp.patterns;
  }
  PipelineEstimator estimator;
  TF_ASSIGN_OR_RETURN(
      r.plan,
      plan_launch(estimator, request, options.max_gpus,
                  resolved.options.training.optimizer.kind != OptimizerKind::kSgd, fsdp_wrap));
  if (!r.plan.fastest) return r;
  TF_ASSIGN_OR_RETURN(EstimateReport chosen, make_estimate_report(r.plan.request));
  TF_CHECK(chosen.scaling.has_value()) << "a baseline batch always gives a scaling plan";
  const LaunchCandidate& c = r.plan.candidates[*r.plan.fastest];
  r.omp_threads = std::max(1, options.host_cores / c.gpus);
  r.command = c.gpus == 1 ? "python3 train.py"
                          : fmt::format(
                                "OMP_NUM_THREADS={} torchrun --standalone --nproc_per_node={} "
                                "train.py",
                                r.omp_threads, c.gpus);
  if (c.gpus > 1 && r.gpu.find("GeForce") != std::string::npos) {
    r.environment.emplace_back(
        "NCCL_P2P_DISABLE=1 if the first all-reduce hangs: GeForce cards have no peer-to-peer, "
        "and hosts with several RTX 4090s hung in NCCL until it was disabled or the driver "
        "updated (NVIDIA/nccl-tests#117)");
  }
  if (c.gpus > 1) {
    r.environment.emplace_back(
        "NCCL_DEBUG=INFO on the first run: the transport NCCL chose (P2P, SHM or NET) decides "
        "the all-reduce's speed; measure it with nccl-tests' all_reduce_perf and give its busbw "
        "as --bus-bandwidth");
  }
  r.code_changes = code_changes(r, chosen);
  r.chosen = std::move(chosen);
  return r;
}

}  // namespace trainfit
