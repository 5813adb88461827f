// The model zoo: named models built from registry ops, each with typed --set keys.
//
//   ModelRequest r;
//   r.name = "resnet50";
//   r.batch = 32;
//   r.sets = {{"num_classes", "10"}};
//   Result<Graph> g = build_model(r);
//   for (const ModelSpec& m : model_zoo()) { ... m.name, m.keys ... }
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/builder.h"
#include "lower/training.h"

namespace trainfit {

enum class InputKind : uint8_t {
  kImage,       // --input CxHxW
  kSequence,    // --seq-len N
  kConfigured,  // its inputs follow from --set keys (a policy's cameras and state)
};

struct SetKey {
  std::string name;
  AttrKind kind = AttrKind::kInt;
  AttrValue default_value;
  std::string doc;
  std::vector<std::string> choices;  // allowed values of a string key
  std::optional<double> min;         // smallest allowed value of a number
  std::optional<double> max;         // largest allowed value of a number
  std::string default_doc;           // shown instead of the default when that depends on others
};

// A --set key, its fields in the order they are usually given.
SetKey set_key(std::string name, AttrKind kind, AttrValue value, std::string doc,
               std::vector<std::string> choices = {}, std::optional<double> min = {},
               std::optional<double> max = {}, std::string default_doc = {});

// An integer key that counts repeated blocks (layers, experts): from `min` to kMaxRepeats.
SetKey count_key(std::string name, int64_t value, std::string doc, double min = 1.0);

// The optimizer a model's own training recipe uses, when --optimizer is not given.
struct OptimizerPreset {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double weight_decay = -1;  // -1: torch's default
  std::string doc;           // "LeRobot's ACT preset: AdamW, lr 1e-5, weight_decay 1e-4, ..."
};

class ModelConfig {
 public:
  int64_t batch = 1;
  Dims input;           // CxHxW for image models
  int64_t seq_len = 0;  // for sequence models

  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  void set(const std::string& key, AttrValue value) { values_[key] = std::move(value); }

 private:
  const AttrValue& get(std::string_view key) const;
  std::map<std::string, AttrValue, std::less<>> values_;
};

using BuildFn = std::function<void(GraphBuilder&, const ModelConfig&)>;
// What a model's own keys decide of how it is built, before it is: the decoders' weights under
// autocast are in the dtype transformers loaded them in.
using OptionsFn = std::function<Status(const ModelConfig&, BuildOptions&)>;

// Repeated blocks that activation checkpointing wraps one at a time: `fit --what-if` offers one
// row per family. Patterns that match no module of a given configuration are left out.
struct CheckpointFamily {
  std::string name;                   // "encoder layers"
  std::vector<std::string> patterns;  // --checkpoint patterns: "model.encoder.layers.*"
};

// A smaller variant of the model (`fit --what-if`, architecture changes): --set values.
struct ModelChange {
  std::string what;  // "chunk_size 100 -> 50"
  std::vector<std::pair<std::string, std::string>> sets;
  std::string cost;  // a setting's: "none (model(..., use_cache=False))"
};
// The changes that apply to a configuration (keys resolved, defaults filled in).
using ChangesFn = std::function<std::vector<ModelChange>(const ModelConfig&)>;

struct ModelSpec {
  std::string name;
  std::string family;  // "resnet", "vgg", ...
  std::string doc;
  InputKind input = InputKind::kImage;
  Dims default_input;           // CxHxW
  int64_t default_seq_len = 0;  // sequence models
  std::vector<SetKey> keys;
  BuildFn build;
  OptionsFn options;  // optional
  std::optional<OptimizerPreset> optimizer;
  std::vector<CheckpointFamily> checkpoint_families;
  std::vector<std::string> backbone;     // --freeze prefixes that freeze its (pretrained) backbone
  std::vector<std::string> lora_target;  // peft's default target modules for the model type
  ChangesFn smaller;                     // optional: architecture what-ifs beyond the input size
  // Optional: settings that keep the model's math and save memory (the key/value cache off,
  // SDPA attention); `fit --what-if` offers them as free knobs.
  ChangesFn settings;
  // --set values that training under --checkpoint forces (transformers' decoders turn their
  // key/value cache off).
  std::vector<std::pair<std::string, std::string>> checkpoint_sets;
  // and --checkpoint-reentrant besides (transformers' and peft's enable_input_require_grads).
  std::vector<std::pair<std::string, std::string>> reentrant_sets;
};

struct ModelRequest {
  std::string name;
  std::vector<std::pair<std::string, std::string>> sets;  // --set key=value, in order
  int64_t batch = 1;
  std::optional<Dims> input;
  std::optional<int64_t> seq_len;
  BuildOptions options;
  bool operator==(const ModelRequest&) const = default;  // the same graph
};

const std::vector<ModelSpec>& model_zoo();
const ModelSpec* find_model(std::string_view name);

// Parses --set values against the model's keys and checks the inputs fit its kind.
Result<ModelConfig> model_config(const ModelRequest& request);
// model_config, then the model's training-forward graph.
Result<Graph> build_model(const ModelRequest& request);

// "3x224x224" -> {3, 224, 224}
Result<Dims> parse_dims(std::string_view text);

// One function per family file.
void add_resnet_models(std::vector<ModelSpec>& models);
void add_vgg_models(std::vector<ModelSpec>& models);
void add_vit_models(std::vector<ModelSpec>& models);
void add_gpt2_models(std::vector<ModelSpec>& models);
void add_decoder_models(std::vector<ModelSpec>& models);
void add_act_models(std::vector<ModelSpec>& models);
void add_diffusion_models(std::vector<ModelSpec>& models);

}  // namespace trainfit
