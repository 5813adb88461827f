#include "sources/trace/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "graph/dtype.h"
#include "lower/optimizer_step.h"
#include "sources/json_fields.h"

namespace trainfit {
namespace {

using nlohmann::json;

constexpr std::string_view kHint = "trace the model again with `python3 -m trainfit.trace`";

int32_t intern(IdVector<std::string>& table, std::map<std::string, int32_t>& index,
               const std::string& s) {
  const auto [it, added] = index.emplace(s, table.next_id());
  if (added) table.push_back(s);
  return it->second;
}

struct Tables {
  std::map<std::string, int32_t> ops, modules, dtypes;
};

Result<TraceOptimizer> parse_optimizer(const json& j, size_t params) {
  if (!j.is_object())
    return parse_error("trace: 'optimizer' must be an object", std::string(kHint));
  JsonFields f(j, "optimizer", kHint);
  TraceOptimizer o;
  TF_ASSIGN_OR_RETURN(o.type, f.string("type"));
  const std::string kind = f.string_or("kind", "");
  // torch.optim's four that trainfit models; anything else replays as traced.
  if (const std::optional<OptimizerKind> k = kOptimizerNames.parse(kind);
      k && !is_bitsandbytes(*k)) {
    o.kind = k;
  }
  const std::string impl = f.string_or("impl", "loop");
  std::optional<OptimizerImpl> parsed = kOptimizerImplNames.parse(impl);
  if (parsed == OptimizerImpl::kDefault) parsed.reset();  // a trace records what ran
  if (!parsed) return f.error(fmt::format("unknown 'impl' '{}' (loop, foreach or fused)", impl));
  o.impl = *parsed;
  TF_ASSIGN_OR_RETURN(const json* groups, f.array("groups"));
  for (size_t g = 0; g < groups->size(); ++g) {
    TF_ASSIGN_OR_RETURN(const JsonFields gf, object_at(*groups, g, "optimizer.groups", kHint));
    const json& gj = (*groups)[g];
    TraceGroup group;
    TF_ASSIGN_OR_RETURN(const json* indices, gf.array("params"));
    for (const json& i : *indices) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 ||
          i.get<int64_t>() >= static_cast<int64_t>(params)) {
        return gf.error(
            fmt::format("parameter index {} is not one of the {} parameters", i.dump(), params));
      }
      group.params.push_back(i.get<int32_t>());
    }
    if (gf.has("weight_decay")) {
      const json& wd = gj.at("weight_decay");
      if (!wd.is_number() || wd.get<double>() < 0) {
        return gf.error("'weight_decay' must be a non-negative number");
      }
      group.weight_decay = wd.get<double>();
    }
    o.groups.push_back(std::move(group));
  }
  return o;
}

// A list of sizes ([2, 3, 224, 224]); `what` names it in errors.
Result<Dims> parse_sizes(const JsonFields& f, const json& j, const std::string& what) {
  if (!j.is_array()) return f.error(fmt::format("{} must be a list of sizes", what));
  Dims dims;
  for (const json& d : j) {
    const bool size =
        d.is_number_integer() &&
        (d.is_number_unsigned() ? d.get<uint64_t>() <= INT64_MAX : d.get<int64_t>() >= 0);
    if (!size) {
      return f.error(fmt::format("{} has {}, not a size", what, d.dump()));
    }
    dims.push_back(d.get<int64_t>());
  }
  return dims;
}

// An allocation's "reduce": the input and summed dimensions of the sum that made it.
Result<TraceReduce> parse_reduce(const JsonFields& e) {
  const json& j = e.json().at("reduce");
  if (!j.is_object()) return e.error("'reduce' must be an object");
  JsonFields r(j, e.where() + ".reduce", kHint);
  TraceReduce reduce;
  if (!r.has("input")) return r.error("'input' is missing");
  if (!r.has("dims")) return r.error("'dims' is missing");
  TF_ASSIGN_OR_RETURN(reduce.input, parse_sizes(r, j.at("input"), "'input'"));
  TF_ASSIGN_OR_RETURN(reduce.dims, parse_sizes(r, j.at("dims"), "'dims'"));
  for (size_t i = 0; i < reduce.dims.size(); ++i) {
    if (reduce.dims[i] >= static_cast<int64_t>(reduce.input.size()) ||
        (i > 0 && reduce.dims[i] <= reduce.dims[i - 1])) {
      return r.error(fmt::format("'dims' must be ascending dimensions of the {}-D input",
                                 reduce.input.size()));
    }
  }
  TF_ASSIGN_OR_RETURN(reduce.contiguous, r.boolean_or("contiguous", true));
  return reduce;
}

// An allocation's "attention": the output of an attention core, with the core's start, the
// storages it read and their shapes, or the gradient of the q, k or v of the core whose output
// is "of" (docs/trace-format.md). Returns the role and the core's index in run.attentions.
Result<std::pair<AttentionRole, int32_t>> parse_attention(const JsonFields& e,
                                                          const std::map<int64_t, int32_t>& live,
                                                          const std::map<int64_t, int32_t>& outputs,
                                                          TraceRun& run) {
  const json& j = e.json().at("attention");
  if (!j.is_object()) return e.error("'attention' must be an object");
  JsonFields a(j, e.where() + ".attention", kHint);
  TF_ASSIGN_OR_RETURN(const std::string name, a.string("role"));
  const std::optional<AttentionRole> role = kAttentionRoleNames.parse(name);
  if (!role) {
    return a.error(fmt::format("unknown role '{}' (output, grad_q, grad_k or grad_v)", name));
  }
  if (*role != AttentionRole::kOutput) {
    TF_ASSIGN_OR_RETURN(const int64_t of, a.integer("of", 0));
    const auto it = outputs.find(of);
    if (it == outputs.end()) {
      return a.error(fmt::format("is a gradient of attention {}, which is not marked", of));
    }
    return std::pair{*role, it->second};
  }
  const auto buffer = [&](const char* key) -> Result<int32_t> {
    TF_ASSIGN_OR_RETURN(const int64_t id, a.integer(key, 0));
    const auto it = live.find(id);
    if (it == live.end()) return a.error(fmt::format("'{}' {} is not allocated", key, id));
    return it->second;
  };
  TraceAttention core;
  TF_ASSIGN_OR_RETURN(core.first, buffer("first"));
  TF_ASSIGN_OR_RETURN(core.q, buffer("q"));
  TF_ASSIGN_OR_RETURN(core.k, buffer("k"));
  TF_ASSIGN_OR_RETURN(core.v, buffer("v"));
  for (auto [key, dims] : {std::pair{"q_shape", &core.q_shape}, std::pair{"k_shape", &core.k_shape},
                           std::pair{"v_shape", &core.v_shape}}) {
    if (!a.has(key)) return a.error(fmt::format("'{}' is missing", key));
    TF_ASSIGN_OR_RETURN(*dims, parse_sizes(a, j.at(key), fmt::format("'{}'", key)));
    if (dims->size() < 3) return a.error(fmt::format("'{}' must have 3 or more sizes", key));
  }
  if (core.k_shape.back() != core.q_shape.back() ||
      core.k_shape[core.k_shape.size() - 2] != core.v_shape[core.v_shape.size() - 2]) {
    return a.error("the shapes of q, k and v do not make an attention");
  }
  TF_ASSIGN_OR_RETURN(core.mask, a.boolean_or("mask", false));
  run.attentions.push_back(std::move(core));
  return std::pair{*role, static_cast<int32_t>(run.attentions.size() - 1)};
}

// A run's "outputs": {"module path": [dims...]}.
Result<std::vector<TraceOutput>> parse_outputs(const JsonFields& f) {
  std::vector<TraceOutput> outputs;
  if (!f.has("outputs")) return outputs;
  const json& j = f.json().at("outputs");
  if (!j.is_object()) return f.error("'outputs' must be an object of module paths and shapes");
  for (const auto& [path, shape] : j.items()) {
    TF_ASSIGN_OR_RETURN(Dims dims, parse_sizes(f, shape, fmt::format("outputs '{}'", path)));
    outputs.push_back({.path = path, .shape = std::move(dims)});
  }
  return outputs;
}

// An allocation's "conv": the convolution that made it (docs/trace-format.md).
Result<std::pair<ConvRole, TraceConv>> parse_conv(const JsonFields& e) {
  const json& j = e.json().at("conv");
  if (!j.is_object()) return e.error("'conv' must be an object");
  const JsonFields f(j, e.where() + ".conv", kHint);
  TF_ASSIGN_OR_RETURN(const std::string role_name, f.string("role"));
  const std::optional<ConvRole> role = kConvRoleNames.parse(role_name);
  if (!role) return f.error(fmt::format("unknown role '{}'", role_name));
  TraceConv c;
  const auto sizes = [&](const char* key) -> Result<Dims> {
    if (!f.has(key)) return f.error(fmt::format("'{}' is missing", key));
    return parse_sizes(f, j.at(key), fmt::format("'{}'", key));
  };
  TF_ASSIGN_OR_RETURN(c.input, sizes("input"));
  TF_ASSIGN_OR_RETURN(c.weight, sizes("weight"));
  TF_ASSIGN_OR_RETURN(c.output, sizes("output"));
  TF_ASSIGN_OR_RETURN(c.stride, sizes("stride"));
  TF_ASSIGN_OR_RETURN(c.padding, sizes("padding"));
  TF_ASSIGN_OR_RETURN(c.dilation, sizes("dilation"));
  TF_ASSIGN_OR_RETURN(c.groups, f.integer("groups", 1));
  TF_ASSIGN_OR_RETURN(c.transposed, f.boolean_or("transposed", false));
  TF_ASSIGN_OR_RETURN(c.channels_last, f.boolean_or("channels_last", false));
  const size_t rank = c.input.size();
  const size_t spatial = rank - 2;
  if (rank < 3 || c.weight.size() != rank || c.output.size() != rank ||
      c.stride.size() != spatial || c.padding.size() != spatial || c.dilation.size() != spatial) {
    return f.error(
        "the shapes and geometry do not agree (input, weight and output of one rank, 3 or "
        "more; stride, padding and dilation one per spatial dimension)");
  }
  return std::pair{*role, std::move(c)};
}

Result<TraceRun> parse_run(const JsonFields& f, Trace& trace, Tables& tables) {
  TraceRun run;
  TF_ASSIGN_OR_RETURN(run.batch, f.integer("batch", 1));
  TF_ASSIGN_OR_RETURN(run.outputs, parse_outputs(f));
  TF_ASSIGN_OR_RETURN(const int64_t iterations, f.integer("iterations", 1));
  if (iterations > 255) return f.error("'iterations' must be at most 255");
  run.iterations = static_cast<int>(iterations);
  TF_ASSIGN_OR_RETURN(const json* events, f.array("events"));
  std::map<int64_t, int32_t> live;       // trace id -> dense buffer index
  std::map<int64_t, int32_t> attention;  // trace id of a core's output -> its TraceAttention
  Phase phase = Phase::kSetup;
  uint8_t iteration = 0;
  run.events.reserve(events->size());
  for (size_t i = 0; i < events->size(); ++i) {
    TF_ASSIGN_OR_RETURN(const JsonFields e, object_at(*events, i, f.where() + ".events", kHint));
    if (e.has("phase")) {
      TF_ASSIGN_OR_RETURN(const std::string p, e.string("phase"));
      // "end": the last iteration's frees belong to its step.
      const std::optional<Phase> named = kPhaseNames.parse(p == "end" ? "optimizer" : p);
      if (!named) return e.error(fmt::format("unknown phase '{}'", p));
      phase = *named;
      TF_ASSIGN_OR_RETURN(const int64_t it, e.integer("iteration", 0));
      if (it > run.iterations) {
        return e.error(fmt::format("iteration {} is past the run's {}", it, run.iterations));
      }
      iteration = static_cast<uint8_t>(it > 0 ? it - 1 : 0);  // events count from 0
      continue;
    }
    if (e.has("attention_backward")) {
      TF_ASSIGN_OR_RETURN(const int64_t id, e.integer("attention_backward", 0));
      const auto it = attention.find(id);
      if (it == attention.end()) {
        return e.error(fmt::format("starts the backward of attention {}, which is not marked", id));
      }
      run.attentions[static_cast<size_t>(it->second)].backward_from =
          static_cast<int32_t>(run.events.size());
      continue;
    }
    TraceEvent ev;
    ev.phase = phase;
    ev.iteration = iteration;
    if (e.has("free")) {
      TF_ASSIGN_OR_RETURN(const int64_t id, e.integer("free", 0));
      const auto it = live.find(id);
      if (it == live.end()) return e.error(fmt::format("frees {}, which is not allocated", id));
      ev.alloc = false;
      ev.buffer = it->second;
      live.erase(it);
      run.events.push_back(ev);
      continue;
    }
    if (!e.has("alloc")) return e.error("is neither a phase mark, an alloc nor a free");
    TF_ASSIGN_OR_RETURN(const int64_t id, e.integer("alloc", 0));
    if (run.allocations == INT32_MAX) return e.error("too many allocations");
    if (!live.emplace(id, run.allocations).second) {
      return e.error(fmt::format("allocates {}, which is already allocated", id));
    }
    ev.buffer = run.allocations++;
    TF_ASSIGN_OR_RETURN(ev.bytes, e.integer("bytes", 0));
    const std::string category = e.string_or("category", "temporary");
    const std::optional<Category> c = kCategoryNames.parse(category);
    if (!c) return e.error(fmt::format("unknown category '{}'", category));
    ev.category = *c;
    if (e.has("op")) {
      TF_ASSIGN_OR_RETURN(const std::string op, e.string("op"));
      ev.op = intern(trace.ops, tables.ops, op);
    }
    if (e.has("module")) {
      TF_ASSIGN_OR_RETURN(const std::string module, e.string("module"));
      if (!module.empty()) ev.module = intern(trace.modules, tables.modules, module);
    }
    if (e.has("dtype")) {
      TF_ASSIGN_OR_RETURN(const std::string dtype, e.string("dtype"));
      ev.dtype = intern(trace.dtypes, tables.dtypes, dtype);
    }
    if (e.has("param")) {
      TF_ASSIGN_OR_RETURN(const int64_t p, e.integer("param", 0));
      if (p >= static_cast<int64_t>(trace.params.size())) {
        return e.error(
            fmt::format("parameter {} is not one of the {} parameters", p, trace.params.size()));
      }
      ev.param = static_cast<int32_t>(p);
    }
    if (e.has("conv")) {
      TF_ASSIGN_OR_RETURN(auto conv, parse_conv(e));
      ev.conv_role = conv.first;
      ev.conv = static_cast<int32_t>(run.convs.size());
      run.convs.push_back(std::move(conv.second));
    }
    if (e.has("reduce")) {
      TF_ASSIGN_OR_RETURN(TraceReduce reduce, parse_reduce(e));
      ev.reduce = static_cast<int32_t>(run.reduces.size());
      run.reduces.push_back(std::move(reduce));
    }
    if (e.has("attention")) {
      TF_ASSIGN_OR_RETURN(const auto role, parse_attention(e, live, attention, run));
      ev.attention_role = role.first;
      ev.attention = role.second;
      if (role.first == AttentionRole::kOutput) attention[id] = role.second;
    }
    if (e.has("cpu")) {
      TF_ASSIGN_OR_RETURN(const std::string mark, e.string("cpu"));
      if (mark == "dropout-noise") {
        ev.dropout_noise = true;
      } else if (mark == "grad-sum") {
        TF_ASSIGN_OR_RETURN(const int64_t old, e.integer("sums", 0));
        const auto it = live.find(old);
        if (it == live.end()) return e.error(fmt::format("sums {}, which is not allocated", old));
        ev.sums = it->second;
      } else {
        return e.error(fmt::format("unknown cpu mark '{}'", mark));
      }
    }
    run.events.push_back(ev);
  }
  return run;
}

Result<TraceAutocast> parse_autocast(const json& j) {
  if (!j.is_object()) return parse_error("trace: 'autocast' must be an object", std::string(kHint));
  JsonFields f(j, "autocast", kHint);
  TraceAutocast autocast;
  TF_ASSIGN_OR_RETURN(autocast.dtype, f.string("dtype"));
  if (autocast.dtype != "bfloat16" && autocast.dtype != "float16") {
    return f.error(fmt::format("dtype '{}' is not bfloat16 or float16", autocast.dtype));
  }
  TF_ASSIGN_OR_RETURN(const std::string lists, f.string("lists"));
  const std::optional<Device> device = kDeviceNames.parse(lists);
  if (!device) return f.error(fmt::format("lists '{}' is not cuda or cpu", lists));
  autocast.lists = *device;
  return autocast;
}

Result<Trace> parse_document(const json& doc) {
  const bool is_trace = doc.is_object() && doc.contains("format") && doc.at("format").is_string() &&
                        doc.at("format").get<std::string>() == kTraceFormat;
  if (!is_trace) {
    return parse_error("not a trainfit trace (its 'format' is not \"trainfit-trace\")",
                       std::string(kHint));
  }
  JsonFields f(doc, "trace", kHint);
  TF_ASSIGN_OR_RETURN(const int64_t version, f.integer("version", 1));
  if (version != kTraceVersion) {
    return unsupported(
        fmt::format("trace format version {} is not the version this trainfit reads ({})", version,
                    kTraceVersion),
        "trace again with the trainfit Python package of this release");
  }
  Trace trace;
  trace.model = f.string_or("model", "traced model");
  trace.torch = f.string_or("torch", "");
  if (f.has("autocast")) {
    TF_ASSIGN_OR_RETURN(trace.autocast, parse_autocast(doc.at("autocast")));
  }
  TF_ASSIGN_OR_RETURN(const json* params, f.array("parameters"));
  for (size_t i = 0; i < params->size(); ++i) {
    TF_ASSIGN_OR_RETURN(const JsonFields p, object_at(*params, i, "parameters", kHint));
    TraceParam param;
    TF_ASSIGN_OR_RETURN(param.name, p.string("name"));
    TF_ASSIGN_OR_RETURN(param.bytes, p.integer("bytes", 0));
    param.itemsize = dtype_itemsize(p.string_or("dtype", ""));
    TF_ASSIGN_OR_RETURN(param.buffer, p.boolean_or("buffer", false));
    TF_ASSIGN_OR_RETURN(param.trainable, p.boolean_or("trainable", !param.buffer));
    trace.params.push_back(std::move(param));
  }
  if (f.has("modules")) {
    TF_ASSIGN_OR_RETURN(const json* modules, f.array("modules"));
    for (size_t i = 0; i < modules->size(); ++i) {
      TF_ASSIGN_OR_RETURN(const JsonFields m, object_at(*modules, i, "modules", kHint));
      TraceModuleInfo info;
      TF_ASSIGN_OR_RETURN(info.path, m.string("path"));
      TF_ASSIGN_OR_RETURN(info.type, m.string("type"));
      trace.module_info.push_back(std::move(info));
    }
  }
  if (!doc.contains("optimizer")) return f.error("'optimizer' is missing");
  TF_ASSIGN_OR_RETURN(trace.optimizer, parse_optimizer(doc.at("optimizer"), trace.params.size()));
  TF_ASSIGN_OR_RETURN(const json* runs, f.array("runs"));
  Tables tables;
  for (size_t r = 0; r < runs->size(); ++r) {
    TF_ASSIGN_OR_RETURN(const JsonFields run_fields, object_at(*runs, r, "runs", kHint));
    TF_ASSIGN_OR_RETURN(TraceRun run, parse_run(run_fields, trace, tables));
    trace.runs.push_back(std::move(run));
  }
  std::stable_sort(trace.runs.begin(), trace.runs.end(),
                   [](const TraceRun& a, const TraceRun& b) { return a.batch < b.batch; });
  for (size_t r = 1; r < trace.runs.size(); ++r) {
    if (trace.runs[r].batch == trace.runs[r - 1].batch) {
      return parse_error(fmt::format("trace: two runs at batch {}", trace.runs[r].batch),
                         std::string(kHint));
    }
  }
  return trace;
}

}  // namespace

int64_t dtype_itemsize(std::string_view name) {
  static constexpr std::pair<std::string_view, int64_t> kSizes[] = {
      {"float32", 4},   {"float", 4},       {"float64", 8},       {"double", 8},
      {"float16", 2},   {"half", 2},        {"bfloat16", 2},      {"int64", 8},
      {"long", 8},      {"int32", 4},       {"int", 4},           {"int16", 2},
      {"short", 2},     {"int8", 1},        {"uint8", 1},         {"bool", 1},
      {"complex64", 8}, {"complex128", 16}, {"float8_e4m3fn", 1}, {"float8_e5m2", 1}};
  for (const auto& [n, size] : kSizes) {
    if (n == name) return size;
  }
  return 0;
}

Result<Trace> parse_trace(std::string_view text, std::string_view source) {
  TF_ASSIGN_OR_RETURN(const json doc,
                      parse_json_file(text, source,
                                      "a trace is the JSON file `python3 -m trainfit.trace --out "
                                      "FILE` writes; a cut-off file means the trace did not "
                                      "finish"));
  Result<Trace> trace = parse_document(doc);
  if (!trace.ok()) return trace.status().with_context(std::string(source));
  return trace;
}

}  // namespace trainfit
