#include "graph/builder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/size_math.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

constexpr size_t kFailedOutputs = 16;

// What a call returns after an error: enough kNone outputs for any op.
std::vector<ValueId> failed_outputs() {
  return std::vector<ValueId>(kFailedOutputs, kNone);
}

// How the op's autocast runs on `target`: the cpu profile's own policy where the registry gives
// one.
Autocast autocast_policy(const OpSchema& schema, KernelTarget target) {
  if (target.device == Device::kCpu && schema.cpu_autocast) return *schema.cpu_autocast;
  return schema.autocast;
}

}  // namespace

bool is_amp(Precision p) {
  return p == Precision::kAmpFp16 || p == Precision::kAmpBf16;
}

DType autocast_dtype(Precision p) {
  return p == Precision::kAmpFp16 ? DType::kFloat16 : DType::kBFloat16;
}

bool path_matches(std::string_view name, std::string_view prefix) {
  if (prefix.empty()) return true;
  if (name.size() < prefix.size() || name.substr(0, prefix.size()) != prefix) return false;
  return name.size() == prefix.size() || name[prefix.size()] == '.' || prefix.back() == '.';
}

GraphBuilder::GraphBuilder(std::string model, BuildOptions options) : options_(std::move(options)) {
  graph_.model = std::move(model);
  graph_.target = options_.target;
  graph_.precision = options_.precision;
  graph_.memory_format = options_.memory_format;
}

void GraphBuilder::fail(const Status& status) {
  if (!status_.ok()) return;
  const ModuleId m = current_module();
  if (m == kNone) {
    status_ = status;
    return;
  }
  const Module& mod = graph_.modules[m];
  const std::string where =
      mod.path.empty() ? mod.name : fmt::format("{} ({})", mod.path, mod.type);
  status_ = status.with_context(where);
}

DType GraphBuilder::activation_dtype() const {
  if (options_.precision == Precision::kBf16) return DType::kBFloat16;
  return is_amp(options_.precision) ? options_.amp_weights : DType::kFloat32;
}

ModuleId GraphBuilder::current_module() const {
  return open_.empty() ? kNone : open_.back().id;
}

int64_t GraphBuilder::dim(ValueId id, int64_t d) const {
  if (id == kNone) return 1;
  const Dims& s = shape(id);
  const auto rank = static_cast<int64_t>(s.size());
  TF_CHECK(d >= -rank && d < rank) << "dim " << d << " of a " << rank << "-D value";
  return s[static_cast<size_t>(d < 0 ? d + rank : d)];
}

std::string GraphBuilder::param_name(std::string_view local) const {
  const ModuleId m = current_module();
  if (m == kNone || graph_.modules[m].path.empty()) return std::string(local);
  return graph_.modules[m].path + "." + std::string(local);
}

bool GraphBuilder::frozen(const std::string& name) const {
  // peft's mark_only_lora_as_trainable: everything but the adapters.
  if (options_.lora && name.find("lora_") == std::string::npos) return true;
  return std::any_of(options_.freeze.begin(), options_.freeze.end(),
                     [&](const std::string& p) { return path_matches(name, p); });
}

const LoraConfig* GraphBuilder::lora_for(std::string_view local) {
  if (!options_.lora || !ok()) return nullptr;
  const std::vector<std::string>& targets = options_.lora->target;
  lora_matched_.resize(targets.size(), false);
  if (std::find(linear_names_.begin(), linear_names_.end(), local) == linear_names_.end()) {
    linear_names_.emplace_back(local);
  }
  // peft's check_target_module_exists: the module's path is a target, or ends in ".target".
  const std::string path = param_name(local);
  bool any = false;
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::string& t = targets[i];
    const bool match =
        t == kAllLinear || path == t ||
        (path.size() > t.size() && path.ends_with(t) && path[path.size() - t.size() - 1] == '.');
    if (match) lora_matched_[i] = true;
    any = any || match;
  }
  return any ? &*options_.lora : nullptr;
}

ValueId GraphBuilder::input(const std::string& name, Dims shape, DType dtype, bool requires_grad) {
  if (!ok()) return kNone;
  const auto numel = checked_numel(shape);
  const auto bytes = numel ? checked_mul(*numel, dtype_bytes(dtype)) : std::nullopt;
  if (!bytes) {
    fail(out_of_range(
        fmt::format("input {} of shape {} overflows int64 bytes", name, shape_string(shape)),
        "use a smaller batch or input size"));
    return kNone;
  }
  Storage s;
  s.bytes = *bytes;
  s.kind = StorageKind::kInput;
  Value v;
  v.storage = graph_.storages.next_id();
  graph_.storages.push_back(s);
  v.strides = contiguous_strides(shape);
  v.shape = std::move(shape);
  v.dtype = dtype;
  v.requires_grad = requires_grad && is_floating(dtype);
  const ValueId id = graph_.values.next_id();
  graph_.values.push_back(std::move(v));
  graph_.inputs.push_back(id);
  graph_.input_names.push_back(name);
  return id;
}

ValueId GraphBuilder::make_param(const ParamSpec& spec) {
  const std::string name = param_name(spec.name);
  if (auto it = param_by_name_.find(name); it != param_by_name_.end()) {
    TF_CHECK(value(it->second).shape == spec.shape)
        << "parameter " << name << " reused with shape " << shape_string(spec.shape);
    return it->second;
  }
  // prepare_model_for_kbit_training leaves the 4-bit weights alone and casts the rest to fp32.
  const bool prepared =
      options_.lora && options_.lora->prepare && options_.lora->quant != LoraConfig::Quant::kOff;
  const DType dtype = spec.dtype.value_or(prepared ? DType::kFloat32 : activation_dtype());
  const auto numel = checked_numel(spec.shape);
  const auto bytes = numel ? checked_mul(*numel, dtype_bytes(dtype)) : std::nullopt;
  if (!bytes) {
    fail(out_of_range(fmt::format("parameter {} of shape {} overflows int64 bytes", name,
                                  shape_string(spec.shape))));
    return kNone;
  }
  Storage s;
  s.bytes = *bytes;
  s.kind = spec.buffer ? StorageKind::kBuffer : StorageKind::kParameter;
  Value v;
  v.storage = graph_.storages.next_id();
  graph_.storages.push_back(s);
  v.shape = spec.shape;
  v.strides = contiguous_strides(spec.shape);
  v.dtype = dtype;
  const bool trainable = spec.trainable && !spec.buffer && is_floating(dtype) && !frozen(name);
  v.requires_grad = trainable;
  const ValueId id = graph_.values.next_id();
  graph_.values.push_back(std::move(v));
  Param p;
  p.value = id;
  p.name = name;
  p.module = current_module();
  p.trainable = trainable;
  p.buffer = spec.buffer;
  p.packing = spec.packing;
  graph_.params.push_back(std::move(p));
  param_by_name_.emplace(name, id);
  return id;
}

ValueId GraphBuilder::parameter(std::string_view local_name, Dims shape, bool buffer,
                                std::optional<DType> dtype, bool trainable) {
  if (!ok()) return kNone;
  ParamSpec spec;
  spec.name = std::string(local_name);
  spec.shape = std::move(shape);
  spec.buffer = buffer;
  spec.dtype = dtype;
  spec.trainable = trainable;
  return make_param(spec);
}

Result<Attrs> GraphBuilder::normalize_attrs(const OpSchema& schema, const Attrs& given) const {
  Attrs out;
  for (const auto& item : given.items()) {
    const std::string& name = item.first;
    const AttrValue& value = item.second;
    const auto spec = std::find_if(schema.attrs.begin(), schema.attrs.end(),
                                   [&](const AttrSpec& a) { return a.name == name; });
    if (spec == schema.attrs.end()) {
      return invalid_argument(fmt::format("{} has no attribute '{}'", schema.name, name));
    }
    const bool kind_ok =
        (spec->kind == AttrKind::kInt && std::holds_alternative<int64_t>(value)) ||
        (spec->kind == AttrKind::kFloat &&
         (std::holds_alternative<double>(value) || std::holds_alternative<int64_t>(value))) ||
        (spec->kind == AttrKind::kBool && std::holds_alternative<bool>(value)) ||
        (spec->kind == AttrKind::kString && std::holds_alternative<std::string>(value)) ||
        (spec->kind == AttrKind::kInts &&
         (std::holds_alternative<Dims>(value) || std::holds_alternative<int64_t>(value)));
    if (!kind_ok) {
      return invalid_argument(fmt::format("{} attribute '{}' must be {}, got {}", schema.name, name,
                                          attr_kind_name(spec->kind), attr_value_string(value)));
    }
  }
  for (const AttrSpec& spec : schema.attrs) {
    if (const AttrValue* v = given.find(spec.name)) {
      // A single int given for a list attribute is a one-element list.
      if (spec.kind == AttrKind::kInts && std::holds_alternative<int64_t>(*v)) {
        out.set(spec.name, Dims{std::get<int64_t>(*v)});
      } else if (spec.kind == AttrKind::kFloat && std::holds_alternative<int64_t>(*v)) {
        out.set(spec.name, static_cast<double>(std::get<int64_t>(*v)));
      } else {
        out.set(spec.name, *v);
      }
    } else if (spec.default_value) {
      if (spec.kind == AttrKind::kInts && std::holds_alternative<int64_t>(*spec.default_value)) {
        out.set(spec.name, Dims{std::get<int64_t>(*spec.default_value)});
      } else {
        out.set(spec.name, *spec.default_value);
      }
    } else {
      return invalid_argument(fmt::format("{} needs attribute '{}'", schema.name, spec.name));
    }
  }
  return out;
}

ValueId GraphBuilder::autocast_input(ValueId input, Autocast policy, DType widest) {
  const Value& v = value(input);
  if (!is_floating(v.dtype) || v.dtype == DType::kFloat64) return input;
  DType target = v.dtype;
  if (policy == Autocast::kLower) target = autocast_dtype(options_.precision);
  if (policy == Autocast::kFp32) target = DType::kFloat32;
  if (policy == Autocast::kPromote) target = widest;
  if (target == v.dtype) return input;
  // autocast caches the cast of an fp32 leaf that requires grad (a trainable parameter) for
  // the whole autocast region (autocast_mode.cpp, cached_cast); a bf16 weight is cast anew.
  const bool cacheable = policy == Autocast::kLower && v.dtype == DType::kFloat32 &&
                         v.producer == kNone && v.requires_grad &&
                         graph_.storages[v.storage].kind == StorageKind::kParameter;
  if (cacheable) {
    if (auto it = autocast_cache_.find(input); it != autocast_cache_.end()) return it->second;
  }
  const auto outs = run_primitive(*op_registry().find("to_copy"), {input},
                                  Attrs{{"dtype", std::string(dtype_name(target))}});
  if (cacheable && ok()) {
    autocast_cache_.emplace(input, outs[0]);
    graph_.autocast_cached.push_back(outs[0]);
  }
  // A cast is what it was cast from (a bf16 copy of attention probabilities is one too).
  if (ok()) graph_.values[outs[0]].role = value(input).role;
  return outs[0];
}

std::vector<ValueId> GraphBuilder::call(std::string_view op, std::vector<ValueId> inputs,
                                        const Attrs& attrs, std::vector<ValueId> params) {
  if (!ok()) return failed_outputs();
  for (ValueId in : inputs) TF_CHECK(in != kNone) << "op " << op << " given a missing input";
  if (graph_.nodes.size() >= options_.max_ops) {
    fail(out_of_range(fmt::format("the model has more than {} ops", options_.max_ops),
                      "a layer count, expert count or list in --set or the config is likely far "
                      "larger than meant; trainfit builds every op"));
    return failed_outputs();
  }
  const OpSchema* schema = op_registry().find(op);
  if (schema == nullptr) {
    fail(not_found(fmt::format("unknown op '{}'", op), "trainfit ops lists the known ops"));
    return failed_outputs();
  }
  const auto n = static_cast<int>(inputs.size());
  if (n < schema->min_inputs || n > schema->max_inputs) {
    fail(invalid_argument(fmt::format("{} takes {} to {} inputs, got {}", op, schema->min_inputs,
                                      schema->max_inputs, n)));
    return failed_outputs();
  }
  Result<Attrs> normalized = normalize_attrs(*schema, attrs);
  if (!normalized.ok()) {
    fail(normalized.status());
    return failed_outputs();
  }
  if (schema->params) {
    std::vector<const Value*> in_values;
    in_values.reserve(inputs.size());
    for (ValueId id : inputs) in_values.push_back(&value(id));
    const OpCall pcall{*normalized, in_values, options_.target, options_.precision,
                       options_.memory_format};
    Result<std::vector<ParamSpec>> spec_list = schema->params(pcall);
    if (!spec_list.ok()) {
      fail(spec_list.status().with_context(std::string(op)));
      return failed_outputs();
    }
    const std::vector<ParamSpec>& specs = *spec_list;
    if (!params.empty()) {
      TF_CHECK(params.size() == specs.size())
          << op << " given " << params.size() << " of " << specs.size() << " parameters";
      for (size_t i = 0; i < specs.size(); ++i) {
        TF_CHECK(value(params[i]).shape == specs[i].shape)
            << op << " parameter " << specs[i].name << " has shape "
            << shape_string(value(params[i]).shape) << ", expected "
            << shape_string(specs[i].shape);
      }
    } else {
      for (const ParamSpec& spec : specs) params.push_back(make_param(spec));
      if (!ok()) return failed_outputs();
    }
  } else {
    TF_CHECK(params.empty()) << op << " has no parameters";
  }
  inputs.insert(inputs.end(), params.begin(), params.end());
  Attrs final_attrs = *normalized;
  const Autocast autocast = autocast_policy(*schema, options_.target);
  if (is_amp(options_.precision) && autocast == Autocast::kFp32Output) {
    const bool low = std::any_of(inputs.begin(), inputs.end(), [&](ValueId id) {
      const DType d = value(id).dtype;
      return d == DType::kFloat16 || d == DType::kBFloat16;
    });
    const std::string attr(schema->compute_dtype_attr);
    if (low && final_attrs.get_string(attr).empty()) {
      final_attrs.set(attr, std::string(dtype_name(DType::kFloat32)));
    }
  } else if (is_amp(options_.precision) && autocast != Autocast::kUnchanged) {
    DType widest = DType::kBool;
    for (ValueId id : inputs) {
      if (is_floating(value(id).dtype)) widest = promote_types(widest, value(id).dtype);
    }
    // autocast_mode.h's wrapper casts the arguments in one call's argument list, which GCC (the
    // compiler of PyTorch's Linux builds) evaluates right to left: a convolution's weight is
    // cast before its input (the H100 recording of resnet50 under fp16 autocast allocates the
    // 18,816-byte weight, then the 9.6 MB input).
    for (auto id = inputs.rbegin(); id != inputs.rend(); ++id) {
      *id = autocast_input(*id, autocast, widest);
    }
    if (!ok()) return failed_outputs();
  }
  if (schema->composite()) {
    std::vector<ValueId> outs = schema->decompose(*this, inputs, final_attrs);
    if (!ok()) return failed_outputs();
    return outs;
  }
  std::vector<ValueId> outs = run_primitive(*schema, std::move(inputs), final_attrs);
  if (!ok()) return failed_outputs();
  return outs;
}

ValueId GraphBuilder::call1(std::string_view op, std::vector<ValueId> inputs, const Attrs& attrs,
                            std::vector<ValueId> params) {
  return call(op, std::move(inputs), attrs, std::move(params)).front();
}

std::vector<ValueId> GraphBuilder::run_primitive(const OpSchema& schema,
                                                 std::vector<ValueId> inputs, const Attrs& attrs) {
  std::vector<const Value*> in_values;
  in_values.reserve(inputs.size());
  for (ValueId id : inputs) in_values.push_back(&value(id));
  const OpCall call{attrs, in_values, options_.target, options_.precision, options_.memory_format};
  std::vector<OutputSpec> specs;
  if (Status s = schema.infer(call, specs); !s.ok()) {
    fail(s.with_context(std::string(schema.name)));
    return failed_outputs();
  }
  const bool recorded =
      schema.differentiable && std::any_of(in_values.begin(), in_values.end(),
                                           [](const Value* v) { return v->requires_grad; });
  // Every rule reads the inputs through `call`, whose pointers die when outputs are appended
  // to the value table below: evaluate them all first.
  const SavedList saved = recorded ? schema.saved(call) : SavedList{};
  Node node;
  node.op = &schema;
  node.attrs = attrs;
  node.inputs = inputs;
  node.module = current_module();
  node.recorded = recorded;
  node.workspace_bytes = schema.workspace(call);
  in_values.clear();
  const NodeId node_id = graph_.nodes.next_id();
  for (OutputSpec& spec : specs) {
    Value v;
    if (spec.alias_of >= 0) {
      TF_CHECK(static_cast<size_t>(spec.alias_of) < inputs.size()) << schema.name;
      v.storage = value(inputs[static_cast<size_t>(spec.alias_of)]).storage;
    } else {
      const auto numel = checked_numel(spec.shape);
      const auto bytes = numel ? checked_mul(*numel, dtype_bytes(spec.dtype)) : std::nullopt;
      if (!bytes) {
        fail(out_of_range(fmt::format("{} output of shape {} overflows int64 bytes", schema.name,
                                      shape_string(spec.shape)),
                          "use a smaller batch or input size"));
        return failed_outputs();
      }
      Storage s;
      s.bytes = *bytes;
      s.kind = StorageKind::kActivation;
      s.producer = node_id;
      s.host = spec.host;
      v.storage = graph_.storages.next_id();
      graph_.storages.push_back(s);
    }
    v.shape = std::move(spec.shape);
    v.strides = std::move(spec.strides);
    v.dtype = spec.dtype;
    v.producer = node_id;
    v.requires_grad = recorded && spec.differentiable;
    node.outputs.push_back(graph_.values.next_id());
    graph_.values.push_back(std::move(v));
  }
  if (recorded) {
    for (const SavedRef& ref : saved) {
      const auto& list = ref.output ? node.outputs : node.inputs;
      TF_CHECK(ref.index >= 0 && static_cast<size_t>(ref.index) < list.size())
          << schema.name << " saves a missing " << (ref.output ? "output " : "input ") << ref.index;
      node.saved.push_back(list[static_cast<size_t>(ref.index)]);
    }
  }
  std::vector<ValueId> outs = node.outputs;
  graph_.nodes.push_back(std::move(node));
  if (!outs.empty()) {
    for (OpenModule& m : open_) m.last_output = outs.front();
  }
  return outs;
}

GraphBuilder::Scope GraphBuilder::module(std::string_view name, std::string_view type) {
  Module m;
  const ModuleId parent = current_module();
  m.parent = parent;
  m.type = std::string(type);
  if (name.empty()) {
    m.name = graph_.model;
  } else {
    m.name = std::string(name);
    const std::string& parent_path = parent == kNone ? std::string() : graph_.modules[parent].path;
    m.path = parent_path.empty() ? m.name : parent_path + "." + m.name;
  }
  m.depth = parent == kNone ? 0 : graph_.modules[parent].depth + 1;
  m.first_node = graph_.nodes.next_id();
  m.end_node = m.first_node;
  const ModuleId id = graph_.modules.next_id();
  graph_.modules.push_back(std::move(m));
  open_.push_back({id});
  return Scope(this, id);
}

GraphBuilder::Scope::~Scope() {
  if (builder_ != nullptr) builder_->close_module(module_);
}

void GraphBuilder::close_module(ModuleId id) {
  TF_CHECK(!open_.empty() && open_.back().id == id) << "modules must close in reverse order";
  Module& m = graph_.modules[id];
  m.output = open_.back().last_output;
  m.end_node = graph_.nodes.next_id();
  open_.pop_back();
}

void GraphBuilder::set_loss(ValueId loss) {
  if (!ok()) return;
  graph_.loss = loss;
}

void GraphBuilder::require_grad(ValueId value) {
  if (!ok()) return;
  Value& v = graph_.values[value];
  if (is_floating(v.dtype)) v.requires_grad = true;
}

void GraphBuilder::returns(ValueId value) {
  if (!ok()) return;
  graph_.returned.push_back(value);
}

void GraphBuilder::fact(std::string key, int64_t value, std::string text) {
  if (!ok()) return;
  graph_.facts.push_back({std::move(key), value, std::move(text)});
}

void GraphBuilder::param_group(std::string prefix, int group) {
  param_groups_.emplace_back(std::move(prefix), group);
}

void GraphBuilder::param_order(std::vector<std::string> prefixes) {
  param_order_ = std::move(prefixes);
}

void GraphBuilder::hold(ValueId value) {
  if (!ok() || value == kNone || graph_.nodes.size() == 0) return;
  graph_.held_until.emplace_back(value, static_cast<NodeId>(graph_.nodes.size() - 1));
}

void GraphBuilder::mark_outputs_since(NodeId first, ValueRole role) {
  if (!ok()) return;
  for (size_t n = static_cast<size_t>(first); n < graph_.nodes.size(); ++n) {
    for (ValueId o : graph_.nodes[n].outputs) graph_.values[o].role = role;
  }
}

Result<Graph> GraphBuilder::finish() && {
  TF_CHECK(open_.empty() || !ok()) << "finish() with open modules";
  if (!ok()) return status_;
  for (const std::string& prefix : options_.freeze) {
    const bool any = std::any_of(graph_.params.begin(), graph_.params.end(),
                                 [&](const Param& p) { return path_matches(p.name, prefix); });
    if (!any) {
      return not_found(
          fmt::format("--freeze '{}' matches no parameter of {}", prefix, graph_.model),
          "parameter names are module paths such as 'layer1.0.conv1.weight'; "
          "trainfit summary lists the modules");
    }
  }
  if (options_.lora) {
    const std::vector<std::string>& targets = options_.lora->target;
    for (size_t i = 0; i < targets.size(); ++i) {
      if (i < lora_matched_.size() && lora_matched_[i]) continue;
      return not_found(fmt::format("--lora target '{}' matches no Linear module of {}", targets[i],
                                   graph_.model),
                       linear_names_.empty()
                           ? std::string("this model has no Linear module LoRA can adapt")
                           : fmt::format("its Linear modules: {}, or all-linear",
                                         fmt::join(linear_names_, ", ")));
    }
  }
  if (!param_order_.empty()) {
    // Rank each parameter once, then order by rank (stable: creation order within a rank).
    std::vector<std::pair<size_t, size_t>> ranked;  // (rank, creation index)
    ranked.reserve(graph_.params.size());
    for (size_t j = 0; j < graph_.params.size(); ++j) {
      size_t rank = param_order_.size();
      for (size_t i = 0; i < param_order_.size(); ++i) {
        if (path_matches(graph_.params[j].name, param_order_[i])) {
          rank = i;
          break;
        }
      }
      ranked.emplace_back(rank, j);
    }
    std::sort(ranked.begin(), ranked.end());
    IdVector<Param> ordered;
    ordered.reserve(ranked.size());
    for (const auto& [rank, j] : ranked) ordered.push_back(std::move(graph_.params[j]));
    graph_.params = std::move(ordered);
  }
  for (Param& p : graph_.params) {
    for (const auto& [prefix, group] : param_groups_) {
      if (path_matches(p.name, prefix)) p.group = group;
    }
  }
  // Nodes whose outputs reach the loss keep their saved tensors until backward; the others
  // are dropped with their outputs.
  graph_.on_loss_path.assign(graph_.nodes.size(), false);
  if (graph_.loss != kNone) {
    std::vector<bool> needed(graph_.values.size(), false);
    needed[static_cast<size_t>(graph_.loss)] = true;
    for (size_t i = graph_.nodes.size(); i-- > 0;) {
      const Node& node = graph_.nodes[i];
      const bool reaches = std::any_of(node.outputs.begin(), node.outputs.end(),
                                       [&](ValueId o) { return needed[static_cast<size_t>(o)]; });
      if (!reaches) continue;
      graph_.on_loss_path[i] = true;
      for (ValueId in : node.inputs) needed[static_cast<size_t>(in)] = true;
    }
  }
  return std::move(graph_);
}

}  // namespace trainfit
