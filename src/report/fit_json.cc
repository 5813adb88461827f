#include "pipeline/request_options.h"
#include "report/json.h"

namespace trainfit {
namespace {

nlohmann::json batch_fit_json(const BatchFit& f) {
  nlohmann::json j{{"max_batch", f.max_batch},
                   {"budget_bytes", f.budget_bytes},
                   {"at_search_limit", f.at_search_limit},
                   {"central_max_batch", f.central_max_batch}};
  if (f.max_batch > 0) {
    j["peak_allocated_bytes"] = f.peak_allocated_bytes;
    j["peak_reserved_bytes"] = f.peak_reserved_bytes;
    j["device_used_bytes"] = f.device_used_bytes;
    j["device_used_upper_bytes"] = f.device_used_upper_bytes;
    j["alloc_retries"] = f.alloc_retries;
  }
  if (!f.at_search_limit) {
    // Without the margin; the batch after the largest fits the whole GPU or it does not.
    j["next_batch_fits_gpu"] = f.next_device_used_bytes >= 0;
    if (f.next_device_used_bytes >= 0) j["next_batch_device_used_bytes"] = f.next_device_used_bytes;
    if (f.next_unlimited_bytes > 0) {
      j["next_batch_unlimited_device_used_bytes"] = f.next_unlimited_bytes;
    }
  }
  return j;
}

nlohmann::json curve_json(const std::vector<BatchPoint>& curve) {
  nlohmann::json points = nlohmann::json::array();
  for (const BatchPoint& p : curve) {
    points.push_back({{"batch", p.batch},
                      {"peak_allocated_bytes", p.peak_allocated_bytes},
                      {"peak_reserved_bytes", p.peak_reserved_bytes},
                      {"device_used_bytes", p.device_used_bytes}});
  }
  return points;
}

nlohmann::json knob_json(const Knob& k) {
  return {{"name", k.name},
          {"kind", knob_kind_name(k.kind)},
          {"args", k.change.args},
          {"cost", k.cost},
          {"recompute_share", k.recompute}};
}

nlohmann::json every_gpu_json(const FitReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json by_name = nlohmann::json::object();
  for (const GpuFit& g : r.gpus) {
    nlohmann::json j = batch_fit_json(g.fit);
    j["gpu"] = g.gpu.name;
    j["display"] = g.gpu.display;
    j["total_bytes"] = g.gpu.total_bytes;
    if (g.time) {
      j["step_time_s"] = g.time->step_s;
      j["samples_per_s"] = g.time->samples_per_s;
    }
    if (!g.curve.empty()) j["curve"] = curve_json(g.curve);
    rows.push_back(j);
    by_name[std::string(g.gpu.name)] = g.fit.max_batch;
  }
  return {{"max_batch", by_name},
          {"gpus", rows},
          {"rank", rank_name(r.rank)},
          {"estimates", r.estimates}};
}

nlohmann::json what_if_json(const WhatIfReport& w) {
  nlohmann::json rows = nlohmann::json::array();
  for (const WhatIfRow& row : w.what_if.rows) {
    nlohmann::json r = knob_json(row.knob);
    r["peak_allocated_bytes"] = row.estimate.peak_allocated_bytes;
    r["peak_reserved_bytes"] = row.estimate.peak_reserved_bytes;
    r["device_used_bytes"] = row.estimate.device_used_bytes;
    r["fits"] = row.estimate.fits;
    r["fit"] = batch_fit_json(row.fit);
    r["estimate_args"] = request_args(row.request);
    if (row.estimate.time) r["step_time_s"] = row.estimate.time->step_s;
    if (row.step_change) r["step_time_change"] = *row.step_change;
    rows.push_back(r);
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& [name, why] : w.what_if.skipped) {
    skipped.push_back({{"name", name}, {"why", why}});
  }
  nlohmann::json j{{"batch", w.batch},
                   {"device_used_bytes", w.what_if.base.device_used_bytes},
                   {"rows", rows},
                   {"skipped", skipped}};
  if (w.what_if.base.time) j["step_time_s"] = w.what_if.base.time->step_s;
  return j;
}

nlohmann::json target_json(const TargetPlan& p) {
  nlohmann::json t{{"batch", p.target},
                   {"fits", p.fits},
                   {"device_used_bytes", p.estimate.device_used_bytes},
                   {"estimate_args", request_args(p.request)}};
  nlohmann::json names = nlohmann::json::array();
  for (const Knob& k : p.knobs) names.push_back(knob_json(k));
  t["knobs"] = names;
  if (p.estimate.time) {
    t["step_time_s"] = p.estimate.time->step_s;
    t["samples_per_s"] = p.estimate.time->samples_per_s;
  }
  if (p.step_change) t["step_time_change"] = *p.step_change;
  if (!p.fits) {
    t["accumulation"] = {{"micro_batch", p.micro_batch},
                         {"steps", p.accumulation},
                         {"effective_batch", p.effective_batch},
                         {"estimated", p.accumulation_estimated}};
  }
  return t;
}

}  // namespace

nlohmann::json fit_json(const FitReport& r) {
  if (!r.gpus.empty()) return every_gpu_json(r);
  nlohmann::json j{{"model", r.header.model},
                   {"gpu", r.device.gpu},
                   {"total_bytes", r.device.total_bytes},
                   {"margin_bytes", r.margin_bytes}};
  j.update(batch_fit_json(r.fit));
  j["rank"] = rank_name(r.rank);
  if (const DistributedConfig& d = r.header.training.distributed; d.strategy != Strategy::kSingle) {
    j["world_size"] = d.world_size;  // max_batch is per rank
    j["strategy"] = strategy_name(d.strategy);
  }
  if (!r.curve.empty()) j["curve"] = curve_json(r.curve);
  if (r.what_if) j["what_if"] = what_if_json(*r.what_if);
  if (r.target) j["target"] = target_json(*r.target);
  j["estimates"] = r.estimates;
  return j;
}

}  // namespace trainfit
