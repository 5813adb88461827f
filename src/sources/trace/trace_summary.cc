#include "sources/trace/trace_summary.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "base/size_math.h"

namespace trainfit {
namespace {

// Figures of one module path in a trace summary.
struct PathFigures {
  int64_t parameters = 0;
  int64_t trainable = 0;
  int64_t kept = 0;
  int64_t kept_next = 0;  // at the batch and one more
};

using PathTable = std::map<std::string, PathFigures, std::less<>>;

// The first component of a module path: "layer1.0.conv1" -> "layer1".
std::string_view top_level(std::string_view path) {
  return path.substr(0, path.find('.'));
}

// Calls add() on `path` and on each module above it: up to the model (""), or for a path
// outside the model (`inside` false: the tracer's loss), up to its top-level component.
template <typename Add>
void roll_up_path(PathTable& table, std::string_view path, bool inside, Add add) {
  for (;;) {
    add(table[std::string(path)]);
    const size_t dot = path.rfind('.');
    if (path.empty() || (!inside && dot == std::string_view::npos)) return;
    path = dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
  }
}

// The outputs of a run by module path.
std::map<std::string_view, const Dims*> outputs_of(const TraceRun& run) {
  std::map<std::string_view, const Dims*> by_path;
  for (const TraceOutput& o : run.outputs) by_path.emplace(o.path, &o.shape);
  return by_path;
}

// A module's output shape at `batch`, each dimension fitted as affine in the batch from the
// first two runs; nullopt when not recorded or not affine.
std::optional<Dims> fitted_output(
    const Trace& t, const std::vector<std::map<std::string_view, const Dims*>>& outputs,
    std::string_view path, int64_t batch) {
  const auto at = [&](size_t run) -> const Dims* {
    const auto it = outputs[run].find(path);
    return it == outputs[run].end() ? nullptr : it->second;
  };
  const Dims* first = at(0);
  if (first == nullptr) return std::nullopt;
  if (t.runs.size() < 2) return affine_dims(*first, t.runs[0].batch, nullptr, 0, batch);
  const Dims* second = at(1);
  if (second == nullptr) return std::nullopt;
  return affine_dims(*first, t.runs[0].batch, second, t.runs[1].batch, batch);
}

}  // namespace

Result<Summary> summarize_trace(const TraceModel& m, int64_t batch,
                                const EstimateOptions& options) {
  const Trace& t = m.trace;
  Summary s;
  s.model = t.model;
  s.batch = batch;
  s.target = options.device.target;
  s.from_trace = true;
  PathTable table;
  // With the model's modules recorded, the loss the tracer runs under a top-level path of its
  // own is outside the model: its own row, beside the model's, as the zoo's summary has it.
  std::set<std::string_view, std::less<>> model_paths;
  for (const TraceModuleInfo& info : t.module_info) model_paths.insert(info.path);
  const auto inside = [&](std::string_view path) {
    return model_paths.empty() || path.empty() || model_paths.contains(top_level(path));
  };
  for (const TraceParam& p : t.params) {
    if (p.buffer) {
      s.buffer_bytes += p.bytes;
      continue;
    }
    const int64_t n = elements(p);
    s.parameters += n;
    s.parameter_bytes += p.bytes;
    if (p.trainable) s.trainable_parameters += n;
    const size_t dot = p.name.rfind('.');
    const std::string_view owner =
        dot == std::string::npos ? std::string_view() : std::string_view(p.name).substr(0, dot);
    roll_up_path(table, owner, inside(owner), [&](PathFigures& f) {
      f.parameters += n;
      if (p.trainable) f.trainable += n;
    });
  }
  // Kept for backward at the batch and at one more (per sample), by the module of each op.
  const auto kept_at = [&](int64_t b, int64_t PathFigures::*field) -> Result<int64_t> {
    TF_ASSIGN_OR_RETURN(const EventList list, trace_events(m, b, options));
    int64_t total = 0;
    for (const BlockItem& k : kept_items(list, 1)) {
      total += k.kept_bytes;
      const std::string_view path =
          k.module == kNone ? std::string_view() : std::string_view(m.tree.modules[k.module].path);
      roll_up_path(table, path, inside(path), [&](PathFigures& f) { f.*field += k.kept_bytes; });
    }
    if (b == batch) {
      for (const Event& e : list.events) {
        if (e.phase == Phase::kBackward) break;
        const Buffer& buffer = list.buffers[e.buffer];
        if (e.alloc && buffer.category == Category::kInput) s.input_bytes += buffer.bytes;
      }
    }
    return total;
  };
  TF_ASSIGN_OR_RETURN(s.activation_bytes, kept_at(batch, &PathFigures::kept));
  const bool per_sample = t.runs.size() > 1;
  if (per_sample) {
    TF_ASSIGN_OR_RETURN(const int64_t next, kept_at(batch + 1, &PathFigures::kept_next));
    s.activation_bytes_per_sample = next - s.activation_bytes;
  }
  std::vector<std::map<std::string_view, const Dims*>> outputs;
  for (const TraceRun& run : t.runs) outputs.push_back(outputs_of(run));
  const auto add_row = [&](const std::string& path, const std::string& type) {
    ModuleRow row;
    row.path = path;
    const size_t dot = path.rfind('.');
    row.name = path.empty() ? t.model : dot == std::string::npos ? path : path.substr(dot + 1);
    row.type = type;
    const int dots = static_cast<int>(std::count(path.begin(), path.end(), '.'));
    row.depth = path.empty() ? 0 : inside(path) ? 1 + dots : dots;
    if (std::optional<Dims> shape = fitted_output(t, outputs, path, batch)) {
      row.has_output = true;
      row.output_shape = std::move(*shape);
    }
    if (const auto it = table.find(path); it != table.end()) {
      row.parameters = it->second.parameters;
      row.trainable_parameters = it->second.trainable;
      row.kept_bytes = it->second.kept;
      if (per_sample) row.kept_bytes_per_sample = it->second.kept_next - it->second.kept;
    } else if (per_sample) {
      row.kept_bytes_per_sample = 0;
    }
    s.modules.push_back(std::move(row));
  };
  if (!t.module_info.empty()) {
    for (const TraceModuleInfo& info : t.module_info) add_row(info.path, info.type);
    for (const auto& [path, figures] : table) {
      if (!inside(path)) add_row(path, "");
    }
  } else {
    for (const Module& module : m.tree.modules) add_row(module.path, "");
  }
  return s;
}

}  // namespace trainfit
