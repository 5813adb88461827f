#include "graph/summary.h"

#include <unordered_set>

#include "base/size_math.h"
#include "graph/activations.h"

namespace trainfit {
namespace {

// Adds `amount` to `module` and all its ancestors.
void roll_up(const Graph& g, ModuleId module, int64_t amount, std::vector<int64_t>& totals) {
  for (ModuleId m = module; m != kNone; m = g.modules[m].parent) {
    totals[static_cast<size_t>(m)] += amount;
  }
}

std::vector<int64_t> kept_by_module(const Graph& g) {
  std::vector<int64_t> kept(g.modules.size(), 0);
  for (const KeptStorage& k : kept_for_backward(g)) roll_up(g, k.module, k.bytes, kept);
  return kept;
}

}  // namespace

Summary summarize(const Graph& g, const Graph* per_sample) {
  Summary s;
  s.model = g.model;
  s.batch = g.batch_size();
  s.target = g.target;
  s.precision = g.precision;
  s.facts = g.facts;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const ValueId id = g.inputs[i];
    const Value& v = g.value(id);
    s.inputs.push_back({g.input_names[i], v.shape, v.dtype});
    s.input_bytes += g.storage_of(id).bytes;
  }
  std::vector<int64_t> params(g.modules.size(), 0);
  std::vector<int64_t> trainable(g.modules.size(), 0);
  for (const Param& p : g.params) {
    const int64_t numel = param_weights(g, p);
    const int64_t bytes = g.storage_of(p.value).bytes;
    if (p.buffer) {
      s.buffer_bytes += bytes;
      continue;
    }
    s.parameters += numel;
    s.parameter_bytes += bytes;
    roll_up(g, p.module, numel, params);
    if (p.trainable) {
      s.trainable_parameters += numel;
      roll_up(g, p.module, numel, trainable);
    }
  }
  const std::vector<int64_t> kept = kept_by_module(g);
  s.activation_bytes = activation_bytes(g);
  std::vector<int64_t> kept_one;
  if (per_sample != nullptr && per_sample->modules.size() == g.modules.size()) {
    kept_one = kept_by_module(*per_sample);
    s.activation_bytes_per_sample = activation_bytes(*per_sample);
  }
  std::unordered_set<std::string> seen_paths;
  for (size_t i = 0; i < g.modules.size(); ++i) {
    const Module& m = g.modules[i];
    ModuleRow row;
    row.path = m.path;
    row.name = m.name;
    row.type = m.type;
    row.depth = m.depth;
    row.has_output = m.output != kNone;
    if (row.has_output) row.output_shape = g.value(m.output).shape;
    row.repeated = !seen_paths.insert(m.path + "\n" + std::to_string(m.depth)).second;
    row.parameters = params[i];
    row.trainable_parameters = trainable[i];
    row.kept_bytes = kept[i];
    if (!kept_one.empty()) row.kept_bytes_per_sample = kept_one[i];
    s.modules.push_back(std::move(row));
  }
  return s;
}

}  // namespace trainfit
