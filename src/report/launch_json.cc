#include "pipeline/request_options.h"
#include "report/json.h"

namespace trainfit {

nlohmann::json launch_json(const LaunchReport& r) {
  nlohmann::json j;
  j["model"] = r.model;
  j["gpu"] = r.gpu;
  j["baseline_batch"] = r.plan.baseline_batch;
  j["max_gpus"] = r.options.max_gpus;
  nlohmann::json candidates = nlohmann::json::array();
  for (const LaunchCandidate& c : r.plan.candidates) {
    candidates.push_back({{"gpus", c.gpus},
                          {"strategy", strategy_name(c.strategy)},
                          {"per_gpu_batch", c.per_gpu_batch},
                          {"grad_accum", c.grad_accum},
                          {"fits", c.fits},
                          {"peak_allocated_bytes", c.estimate.peak_allocated_bytes},
                          {"device_used_bytes", c.estimate.device_used_bytes},
                          {"step_time_s", c.step_s},
                          {"gpu_seconds", c.gpu_seconds()},
                          {"estimate_args", request_args(c.request)}});
  }
  j["candidates"] = candidates;
  j["estimates"] = r.plan.estimates;
  j["fits"] = r.plan.fastest.has_value();
  if (!r.plan.fastest || !r.chosen) return j;
  const LaunchCandidate& c = r.plan.candidates[*r.plan.fastest];
  const ScalingPlan& s = *r.chosen->scaling;
  j["gpus"] = c.gpus;
  j["strategy"] = strategy_name(c.strategy);
  j["per_gpu_batch"] = c.per_gpu_batch;
  j["grad_accum"] = c.grad_accum;
  j["effective_batch"] = s.effective_batch;
  j["lr"] = s.lr ? nlohmann::json(*s.lr) : nlohmann::json();
  j["lr_rule"] = s.lr ? nlohmann::json(lr_rule_name(s.rule)) : nlohmann::json();
  j["warmup_steps"] = s.warmup_steps ? nlohmann::json(*s.warmup_steps) : nlohmann::json();
  j["step_time_s"] = c.step_s;
  j["peak_allocated_bytes"] = c.estimate.peak_allocated_bytes;
  j["device_used_bytes"] = c.estimate.device_used_bytes;
  j["cheapest"] = {{"gpus", r.plan.candidates[*r.plan.cheapest].gpus},
                   {"strategy", strategy_name(r.plan.candidates[*r.plan.cheapest].strategy)},
                   {"per_gpu_batch", r.plan.candidates[*r.plan.cheapest].per_gpu_batch},
                   {"grad_accum", r.plan.candidates[*r.plan.cheapest].grad_accum}};
  j["omp_num_threads"] = r.omp_threads;
  j["command"] = r.command;
  j["environment"] = r.environment;
  j["link"] = {{"name", kLinkNames.name(r.link.kind)},
               {"bus_gbps", r.link.bus_gbps},
               {"measured", r.link.measured}};
  j["estimate_args"] = request_args(r.plan.request);
  j["code_changes"] = r.code_changes;
  j["scaling"] = scaling_json(s);
  return j;
}

}  // namespace trainfit
