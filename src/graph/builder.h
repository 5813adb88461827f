// GraphBuilder: builds a Graph by running registry ops inside module scopes, the way a
// PyTorch forward pass runs them.
//
//   GraphBuilder b("resnet18", options);
//   ValueId x = b.input("image", {8, 3, 224, 224}, b.activation_dtype());
//   {
//     auto model = b.module("", "ResNet");
//     auto conv1 = b.module("conv1", "Conv2d");
//     x = b.call1("conv2d", {x}, {{"out_channels", 64}, {"kernel_size", 7}, ...});
//   }
//   Result<Graph> g = std::move(b).finish();
//
// Errors do not need checking at each call: the first one is kept (with the module it happened
// in), later calls return kNone and do nothing, and finish() returns it. Parameters are created
// in the current module under their state_dict names; a second module entry with the same path
// reuses them, as calling one nn.Module twice does.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "graph/graph.h"
#include "graph/op_schema.h"

namespace trainfit {

// LoRA as peft adds it (LoraConfig, get_peft_model): every Linear module whose path ends in a
// target name becomes a lora.Linear, base_layer(x) + lora_B(lora_A(dropout(x))) * alpha / rank,
// and only the adapters (parameters named lora_*) train.
struct LoraConfig {
  int64_t rank = 8;
  double alpha = 8;
  double dropout = 0;               // 0: nn.Identity, no dropout op
  std::vector<std::string> target;  // module names, or "all-linear"; empty: the model's default
  // get_peft_model's autocast_adapter_dtype (true by default): adapters made in bf16 or fp16,
  // the dtype of the layer they adapt, are cast to fp32, and so is each input they see.
  bool fp32_adapters = true;
  // QLoRA: BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=..., bnb_4bit_compute_dtype
  // = the model's dtype, bnb_4bit_use_double_quant=...) makes every Linear but lm_head a frozen
  // bitsandbytes Linear4bit, whether it is a target or not.
  enum class Quant : uint8_t { kOff, kNf4, kFp4 };
  Quant quant = Quant::kOff;
  bool double_quant = true;
  // peft's prepare_model_for_kbit_training on the 4-bit model: every bf16 or fp16 parameter that
  // is not a 4-bit weight (embeddings, norms, lm_head) cast to fp32, so the hidden states between
  // the 4-bit layers are fp32; each 4-bit layer casts its input to the compute dtype and its
  // output back.
  bool prepare = false;
  bool operator==(const LoraConfig&) const = default;
};
inline constexpr std::string_view kAllLinear = "all-linear";

// The most ops a graph may have. Each op costs an estimate about 2.4 KB and 14 us (built,
// lowered, replayed), so a million is 2.4 GB and some 15 seconds: a hundred times the largest
// model in the zoo (Llama with Llama 3.1 405B's 126 layers, under 10,000 ops). A model past it,
// usually a count or list typed orders of magnitude too large, stops with an error instead of
// taking the host's memory.
inline constexpr size_t kMaxOps = 1'000'000;

struct BuildOptions {
  KernelTarget target;
  Precision precision = Precision::kFp32;
  MemoryFormat memory_format = MemoryFormat::kChannelsFirst;
  std::vector<std::string> freeze;  // parameter-name prefixes that do not train
  std::optional<LoraConfig> lora;
  // Under autocast, the dtype the floating parameters are in: fp32 (master weights, as mixed
  // precision is usually described), or the dtype the model was loaded in (transformers 5 loads
  // a checkpoint in its config's dtype, bf16 for most: autocast then has few casts to make).
  DType amp_weights = DType::kFloat32;
  size_t max_ops = kMaxOps;  // the most ops the graph may have
  bool operator==(const BuildOptions&) const = default;
};

class GraphBuilder {
 public:
  GraphBuilder(std::string model, BuildOptions options);

  const BuildOptions& options() const { return options_; }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // Keeps the first error, prefixed with the module it happened in.
  void fail(const Status& status);

  // The dtype of floating inputs and parameters: bf16 under pure bf16, BuildOptions::amp_weights
  // under autocast, else fp32.
  DType activation_dtype() const;

  // A batch tensor. requires_grad is for op tests that stand in for an activation.
  ValueId input(const std::string& name, Dims shape, DType dtype, bool requires_grad = false);

  // Runs `op` on activation `inputs`. Its parameters are created in the current module, or
  // taken from `params` (weight tying). Returns the op's outputs; after an error, a list of
  // kNone long enough for any op.
  std::vector<ValueId> call(std::string_view op, std::vector<ValueId> inputs,
                            const Attrs& attrs = {}, std::vector<ValueId> params = {});
  ValueId call1(std::string_view op, std::vector<ValueId> inputs, const Attrs& attrs = {},
                std::vector<ValueId> params = {});

  // The adapter a Linear module named `local`, inside the current module, gets under
  // BuildOptions::lora, or nullptr. Models call it for each Linear they make (nn::linear does);
  // finish() refuses a target that matched none of them.
  const LoraConfig* lora_for(std::string_view local);

  // A parameter or buffer owned directly by the current module (ViT's class_token).
  ValueId parameter(std::string_view local_name, Dims shape, bool buffer = false,
                    std::optional<DType> dtype = {}, bool trainable = true);

  class Scope {
   public:
    Scope(GraphBuilder* builder, ModuleId module) : builder_(builder), module_(module) {}
    Scope(Scope&& other) noexcept : builder_(other.builder_), module_(other.module_) {
      other.builder_ = nullptr;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope();
    ModuleId id() const { return module_; }

   private:
    GraphBuilder* builder_;
    ModuleId module_;
  };
  // Enters a module; "" names the model itself. Leaves it when the Scope is destroyed.
  [[nodiscard]] Scope module(std::string_view name, std::string_view type);

  void set_loss(ValueId loss);
  // A tensor the model returns beside its output (Graph::returned).
  void returns(ValueId value);
  // tensor.requires_grad_(): a floating value made so far without a gradient becomes a leaf that
  // needs one; the ops that take it from here on record backward nodes.
  void require_grad(ValueId value);
  // A derived number users ask about (graph.h GraphFact).
  void fact(std::string key, int64_t value, std::string text);
  // Parameters whose names fall under `prefix` go to optimizer group `group` (LeRobot ACT's
  // backbone group). Applied at finish(); later rules win.
  void param_group(std::string prefix, int group);
  // Orders Graph::params as the model's __init__ registers them, which is the order
  // model.parameters() and so the optimizer see: by the first prefix that matches, then in
  // creation order. Without it, parameters keep the order the forward pass creates them in.
  void param_order(std::vector<std::string> prefixes);
  // A Python local still references `value` here: its storage lives at least until the last
  // node made so far has run.
  void hold(ValueId value);
  // Gives every output of the nodes made since `first` the role `role`.
  void mark_outputs_since(NodeId first, ValueRole role);
  NodeId node_count() const { return graph_.nodes.next_id(); }
  const Value& value(ValueId id) const { return graph_.value(id); }
  const Dims& shape(ValueId id) const { return value(id).shape; }
  int64_t dim(ValueId id, int64_t d) const;

  Result<Graph> finish() &&;

 private:
  ValueId make_param(const ParamSpec& spec);
  ValueId autocast_input(ValueId input, Autocast policy, DType widest);
  std::vector<ValueId> run_primitive(const OpSchema& schema, std::vector<ValueId> inputs,
                                     const Attrs& attrs);
  Result<Attrs> normalize_attrs(const OpSchema& schema, const Attrs& given) const;
  bool frozen(const std::string& param_name) const;
  void close_module(ModuleId module);
  std::string param_name(std::string_view local) const;
  ModuleId current_module() const;

  struct OpenModule {
    ModuleId id;
    ValueId last_output = kNone;
  };

  BuildOptions options_;
  Graph graph_;
  Status status_;
  std::vector<OpenModule> open_;
  std::unordered_map<std::string, ValueId> param_by_name_;
  std::unordered_map<ValueId, ValueId> autocast_cache_;  // fp32 parameter -> its cached cast
  std::vector<std::pair<std::string, int>> param_groups_;
  std::vector<std::string> param_order_;
  std::vector<std::string> linear_names_;  // local names of the Linear modules lora_for saw
  std::vector<bool> lora_matched_;         // per LoraConfig::target
};

// torch.autocast: amp-fp16 or amp-bf16, and the dtype it lowers to.
bool is_amp(Precision p);
DType autocast_dtype(Precision p);

// Does `name` fall under `prefix` ("layer1" covers "layer1.0.conv1.weight", not "layer10...")?
bool path_matches(std::string_view name, std::string_view prefix);

}  // namespace trainfit
