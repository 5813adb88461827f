#include "sources/zoo/zoo.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/limits.h"
#include "base/size_math.h"
#include "base/suggest.h"

namespace trainfit {
namespace {

Result<int64_t> parse_int(std::string_view text) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range)
    return out_of_range(fmt::format("{} overflows int64", text));
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    return parse_error(fmt::format("'{}' is not an integer", text));
  }
  return v;
}

Result<AttrValue> parse_value(const SetKey& key, std::string_view text) {
  switch (key.kind) {
    case AttrKind::kInt: {
      TF_ASSIGN_OR_RETURN(int64_t v, parse_int(text));
      return AttrValue{v};
    }
    case AttrKind::kFloat: {
      const std::string s(text);
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
        return parse_error(fmt::format("'{}' is not a number", text));
      }
      return AttrValue{v};
    }
    case AttrKind::kBool:
      if (text == "true" || text == "1" || text == "yes") return AttrValue{true};
      if (text == "false" || text == "0" || text == "no") return AttrValue{false};
      return parse_error(fmt::format("'{}' is not true or false", text));
    case AttrKind::kString:
      if (!key.choices.empty() &&
          std::find(key.choices.begin(), key.choices.end(), text) == key.choices.end()) {
        return invalid_argument(
            fmt::format("'{}' is not one of {}", text, fmt::join(key.choices, ", ")));
      }
      return AttrValue{std::string(text)};
    case AttrKind::kInts:
      return unsupported("list-valued keys are not parsed here");
  }
  return parse_error("unknown key kind");
}

Status check_range(const SetKey& key, const AttrValue& value) {
  double v = 0;
  if (std::holds_alternative<int64_t>(value))
    v = static_cast<double>(std::get<int64_t>(value));
  else if (std::holds_alternative<double>(value))
    v = std::get<double>(value);
  else
    return {};
  if (key.min && v < *key.min) {
    return invalid_argument(fmt::format("must be at least {}", *key.min));
  }
  if (key.max && v > *key.max) {
    return invalid_argument(fmt::format("must be at most {}", *key.max));
  }
  return {};
}

std::vector<ModelSpec> make_zoo() {
  std::vector<ModelSpec> models;
  add_resnet_models(models);
  add_vgg_models(models);
  add_vit_models(models);
  add_gpt2_models(models);
  add_decoder_models(models);
  add_act_models(models);
  add_diffusion_models(models);
  return models;
}

}  // namespace

SetKey set_key(std::string name, AttrKind kind, AttrValue value, std::string doc,
               std::vector<std::string> choices, std::optional<double> min,
               std::optional<double> max, std::string default_doc) {
  return SetKey{
      std::move(name),       kind, std::move(value), std::move(doc), std::move(choices), min, max,
      std::move(default_doc)};
}

SetKey count_key(std::string name, int64_t value, std::string doc, double min) {
  return set_key(std::move(name), AttrKind::kInt, value, std::move(doc), {}, min,
                 static_cast<double>(kMaxRepeats));
}

const AttrValue& ModelConfig::get(std::string_view key) const {
  const auto it = values_.find(key);
  TF_CHECK(it != values_.end()) << "model reads an undeclared key " << key;
  return it->second;
}
int64_t ModelConfig::get_int(std::string_view key) const {
  return std::get<int64_t>(get(key));
}
double ModelConfig::get_float(std::string_view key) const {
  const AttrValue& v = get(key);
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  return std::get<double>(v);
}
bool ModelConfig::get_bool(std::string_view key) const {
  return std::get<bool>(get(key));
}
const std::string& ModelConfig::get_string(std::string_view key) const {
  return std::get<std::string>(get(key));
}

const std::vector<ModelSpec>& model_zoo() {
  static const std::vector<ModelSpec> kZoo = make_zoo();
  return kZoo;
}

const ModelSpec* find_model(std::string_view name) {
  for (const ModelSpec& m : model_zoo()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

Result<Dims> parse_dims(std::string_view text) {
  Dims dims;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('x', start), text.size());
    TF_ASSIGN_OR_RETURN(int64_t v, parse_int(text.substr(start, end - start)));
    if (v < 1) return invalid_argument(fmt::format("sizes in '{}' must be positive", text));
    dims.push_back(v);
    start = end + 1;
  }
  return dims;
}

Result<ModelConfig> model_config(const ModelRequest& request) {
  const ModelSpec* spec = find_model(request.name);
  if (spec == nullptr) {
    std::vector<std::string> names;
    for (const ModelSpec& m : model_zoo()) names.push_back(m.name);
    const std::string guess = closest(request.name, names);
    return not_found(fmt::format("unknown model '{}'", request.name),
                     guess.empty()
                         ? "trainfit models lists the zoo"
                         : fmt::format("did you mean '{}'? trainfit models lists the zoo", guess));
  }
  if (request.batch < 1) {
    return invalid_argument(fmt::format("batch must be at least 1, got {}", request.batch),
                            "use --batch 1 or more");
  }
  ModelConfig config;
  config.batch = request.batch;
  if (spec->input == InputKind::kImage) {
    if (request.seq_len) {
      return invalid_argument(fmt::format("{} takes images, not --seq-len", spec->name),
                              fmt::format("use --input {}", shape_string(spec->default_input)));
    }
    config.input = request.input.value_or(spec->default_input);
    if (config.input.size() != 3) {
      return invalid_argument(
          fmt::format("--input must be CxHxW, got {}", shape_string(config.input)),
          fmt::format("for example --input {}", shape_string(spec->default_input)));
    }
  } else if (spec->input == InputKind::kConfigured) {
    if (request.input || request.seq_len) {
      return invalid_argument(
          fmt::format("{} takes its inputs from --set keys, not --input or --seq-len", spec->name),
          "set cameras, state_dim and the like; trainfit models lists them");
    }
  } else {
    if (request.input) {
      return invalid_argument(fmt::format("{} takes token sequences, not --input", spec->name),
                              fmt::format("use --seq-len {}", spec->default_seq_len));
    }
    config.seq_len = request.seq_len.value_or(spec->default_seq_len);
    if (config.seq_len < 1) {
      return invalid_argument("--seq-len must be at least 1", "use --seq-len 1 or more");
    }
  }
  for (const SetKey& key : spec->keys) config.set(key.name, key.default_value);
  for (const auto& set : request.sets) {
    const std::string& name = set.first;
    const std::string& text = set.second;
    const auto key = std::find_if(spec->keys.begin(), spec->keys.end(),
                                  [&](const SetKey& k) { return k.name == name; });
    if (key == spec->keys.end()) {
      std::vector<std::string> names;
      for (const SetKey& k : spec->keys) names.push_back(k.name);
      const std::string guess = closest(name, names);
      const std::string valid =
          names.empty() ? "it has none" : fmt::format("its keys: {}", fmt::join(names, ", "));
      return not_found(fmt::format("{} has no --set key '{}'", spec->name, name),
                       guess.empty() ? valid : fmt::format("did you mean '{}'? {}", guess, valid));
    }
    Result<AttrValue> value = parse_value(*key, text);
    if (value.ok()) {
      if (Status s = check_range(*key, *value); !s.ok()) value = s;
    }
    if (!value.ok()) {
      return Status(value.status().code(),
                    fmt::format("--set {}={}: {}", name, text, value.status().message()),
                    fmt::format("{} ({}, default {})", key->doc, attr_kind_name(key->kind),
                                key->default_doc.empty() ? attr_value_string(key->default_value)
                                                         : key->default_doc));
    }
    config.set(name, *value);
  }
  return config;
}

Result<Graph> build_model(const ModelRequest& request) {
  TF_ASSIGN_OR_RETURN(const ModelConfig config, model_config(request));
  const ModelSpec* spec = find_model(request.name);
  BuildOptions options = request.options;
  if (spec->options) TF_RETURN_IF_ERROR(spec->options(config, options).with_context(spec->name));
  GraphBuilder builder(spec->name, std::move(options));
  spec->build(builder, config);
  Result<Graph> graph = std::move(builder).finish();
  if (!graph.ok()) return graph.status().with_context(spec->name);
  return graph;
}

}  // namespace trainfit
