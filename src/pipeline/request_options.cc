#include "pipeline/request_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "estimate/collectives.h"
#include "graph/shape.h"

namespace trainfit {
namespace {

// The front ends hand each setter a value of its row's kind; another is a bug.
template <typename T>
const T& as(const OptionValue& value) {
  const T* v = std::get_if<T>(&value);
  TF_CHECK(v != nullptr) << "an option value of the wrong kind";
  return *v;
}

template <const auto& kNames>
std::vector<std::string_view> names_of() {
  std::vector<std::string_view> names;
  for (const auto& e : kNames.entries) names.push_back(e.name);
  return names;
}

// Counts such as --gpus and --grad-accum are ints in the request.
Result<int> narrow(int64_t value, std::string_view name) {
  if (value > std::numeric_limits<int>::max() || value < std::numeric_limits<int>::min()) {
    return out_of_range(fmt::format("{} {} is too large", name, value),
                        "every rank and micro-batch is planned: a few thousand at most");
  }
  return static_cast<int>(value);
}

// ---- Setters and getters shared by rows of one shape.

template <auto TrainingRequest::*kField>
Status set_text(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.*kField = as<std::string>(v);
  return {};
}

template <auto TrainingRequest::*kField>
Status set_list(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  const auto& items = as<std::vector<std::string>>(v);
  (d.request.*kField).insert((d.request.*kField).end(), items.begin(), items.end());
  return {};
}

template <auto TrainingRequest::*kField>
void list_words(const TrainingRequest& r, const OptionWords& w) {
  for (const std::string& item : r.*kField) w.add(item);
}

template <bool StepSwitches::*kField>
Status set_switch(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.switches.*kField = as<bool>(v);
  return {};
}

// A switch's flag where it differs from its default (true for --no-KEY).
template <bool StepSwitches::*kField>
void switch_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.switches.*kField != StepSwitches{}.*kField || w.always) w.add_flag();
}

template <bool TrainingRequest::*kField>
Status set_bool(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.*kField = as<bool>(v);
  return {};
}

template <bool TrainingRequest::*kField>
void bool_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.*kField || w.always) w.add_flag();
}

template <int TrainingRequest::*kField>
Status set_int(RequestDraft& d, const OptionValue& v, std::string_view name) {
  TF_ASSIGN_OR_RETURN(d.request.*kField, narrow(as<int64_t>(v), name));
  return {};
}

template <int TrainingRequest::*kField, int kDefault>
void int_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.*kField != kDefault || w.always) w.add(std::to_string(r.*kField));
}

template <std::optional<int64_t> TrainingRequest::*kField>
Status set_optional_int(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.*kField = as<int64_t>(v);
  return {};
}

template <std::optional<int64_t> TrainingRequest::*kField>
void optional_int_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.*kField) w.add(std::to_string(*(r.*kField)));
}

template <std::optional<double> TrainingRequest::*kField>
Status set_optional_float(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.*kField = as<double>(v);
  return {};
}

template <std::optional<double> TrainingRequest::*kField>
void optional_float_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.*kField) w.add(fmt::format("{:g}", *(r.*kField)));
}

template <const auto& kNames, auto TrainingRequest::*kField>
Status set_enum(RequestDraft& d, const OptionValue& v, std::string_view name) {
  TF_ASSIGN_OR_RETURN(d.request.*kField, parse_enum(kNames, name, as<std::string>(v)));
  return {};
}

template <const auto& kNames, auto TrainingRequest::*kField, auto kDefault>
void enum_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.*kField != kDefault || w.always) w.add(std::string(kNames.name(r.*kField)));
}

template <const auto& kNames, auto TrainingRequest::*kField>
void optional_enum_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.*kField) w.add(std::string(kNames.name(*(r.*kField))));
}

// A --set value as the zoo reads it: Python's True as true, a list as a,b,c.
std::string field_text(const FieldValue& value) {
  struct Text {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t n) const { return std::to_string(n); }
    std::string operator()(double x) const { return fmt::format("{}", x); }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::vector<std::string>& items) const {
      return fmt::format("{}", fmt::join(items, ","));
    }
  };
  return std::visit(Text{}, value);
}

// ---- The rows' own setters and getters.

Status set_model(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.model = as<std::string>(v);
  return {};
}

void model_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.hf_config.empty() && !r.model.empty()) w.add(r.model);
}

Status set_hf_config(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  const auto& file = as<OptionFile>(v);
  TF_ASSIGN_OR_RETURN(HfModel model, parse_hf_config(file.text, file.path));
  d.hf_config.emplace(std::move(model), file.path);
  return {};
}

void hf_config_words(const TrainingRequest& r, const OptionWords& w) {
  if (!r.hf_config.empty()) w.add(r.hf_config);
}

Status set_trace(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  if (const auto* loaded = std::get_if<OptionTrace>(&v)) {
    d.request.trace = loaded->model;
    d.request.trace_source = loaded->source;
    return {};
  }
  const auto& file = as<OptionFile>(v);
  TF_ASSIGN_OR_RETURN(d.request.trace, load_trace(file.text, file.path));
  d.request.trace_source = file.path;
  return {};
}

void trace_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.trace) w.add(r.trace_source);
}

Status set_sets(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  for (const auto& [key, value] : as<OptionFields>(v)) {
    d.request.sets.emplace_back(key, field_text(value));
  }
  return {};
}

void sets_words(const TrainingRequest& r, const OptionWords& w) {
  // The values a config.json gave come from the file.
  const size_t first = r.hf_config.empty() ? 0 : std::min(r.hf_sets, r.sets.size());
  for (size_t i = first; i < r.sets.size(); ++i) {
    w.add(fmt::format("{}={}", r.sets[i].first, r.sets[i].second));
  }
}

Status set_batch(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.batch = as<int64_t>(v);
  return {};
}

void batch_words(const TrainingRequest& r, const OptionWords& w) {
  w.add(std::to_string(r.batch));  // always: a command line reads better with it
}

Status set_input(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.input = as<Dims>(v);
  return {};
}

void input_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.input) w.add(shape_string(*r.input));
}

Status set_device_profile(RequestDraft& d, const OptionValue& v, std::string_view name) {
  TF_ASSIGN_OR_RETURN(d.device.profile, parse_enum(kDeviceNames, name, as<std::string>(v)));
  return {};
}

void device_profile_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.device.target.device != Device::kCuda || w.always) {
    w.add(std::string(kDeviceNames.name(r.device.target.device)));
  }
}

Status set_lora(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  TF_ASSIGN_OR_RETURN(d.request.lora, lora_from_fields(as<OptionFields>(v)));
  return {};
}

void lora_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.lora) w.add(lora_arg(*r.lora));
}

Status set_default_device(RequestDraft& d, const OptionValue& v, std::string_view name) {
  const std::string& device = as<std::string>(v);
  if (device != "cpu" && device != "cuda") {
    return invalid_argument(fmt::format("{} {} is not a device", name, device),
                            "give cpu (tensors made without a device stay on the host) or cuda");
  }
  d.request.cuda_default_device = device == "cuda";
  return {};
}

void default_device_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.cuda_default_device || w.always) w.add(r.cuda_default_device ? "cuda" : "cpu");
}

std::vector<std::string_view> default_device_names() {
  return {"cpu", "cuda"};
}

void weight_decay_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.weight_decay) w.add(fmt::format("{}", *r.weight_decay));
}

Status set_bucket_cap_mb(RequestDraft& d, const OptionValue& v, std::string_view name) {
  const double mb = as<double>(v);
  if (!(mb > 0 && mb < 1e9)) {
    return invalid_argument(fmt::format("{} {:g} is not a size", name, mb),
                            "DDP's default is 25 (MiB)");
  }
  // DDP: int(bucket_cap_mb * 1024 * 1024).
  d.request.ddp.bucket_cap_bytes = static_cast<int64_t>(mb * 1024 * 1024);
  return {};
}

void bucket_cap_mb_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.ddp.bucket_cap_bytes) {
    w.add(fmt::format("{:g}", static_cast<double>(*r.ddp.bucket_cap_bytes) / (1 << 20)));
  }
}

Status set_gradient_as_bucket_view(RequestDraft& d, const OptionValue& v, std::string_view) {
  d.request.ddp.gradient_as_bucket_view = as<bool>(v);
  return {};
}

void gradient_as_bucket_view_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.ddp.gradient_as_bucket_view || w.always) w.add_flag();
}

Status set_find_unused_parameters(RequestDraft& d, const OptionValue& v, std::string_view) {
  d.request.ddp.find_unused_parameters = as<bool>(v);
  return {};
}

void find_unused_parameters_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.ddp.find_unused_parameters || w.always) w.add_flag();
}

Status set_broadcast_buffers(RequestDraft& d, const OptionValue& v, std::string_view) {
  d.request.ddp.broadcast_buffers = as<bool>(v);
  return {};
}

void broadcast_buffers_words(const TrainingRequest& r, const OptionWords& w) {
  if (!r.ddp.broadcast_buffers) w.add_flag();  // --no-broadcast-buffers
}

Status set_fsdp_wrap(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  // Repeated or comma-separated: "layer1,layer2" is two units.
  for (const std::string& item : as<std::vector<std::string>>(v)) {
    size_t start = 0;
    while (start <= item.size()) {
      const size_t comma = std::min(item.find(',', start), item.size());
      d.request.fsdp.wrap.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return {};
}

void fsdp_wrap_words(const TrainingRequest& r, const OptionWords& w) {
  for (const std::string& pattern : r.fsdp.wrap) w.add(pattern);
}

Status set_fsdp_sharding(RequestDraft& d, const OptionValue& v, std::string_view name) {
  TF_ASSIGN_OR_RETURN(d.request.fsdp.sharding,
                      parse_enum(kFsdpShardingNames, name, as<std::string>(v)));
  return {};
}

void fsdp_sharding_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.fsdp.sharding != FsdpSharding::kFullShard || w.always) {
    w.add(std::string(kFsdpShardingNames.name(r.fsdp.sharding)));
  }
}

Status set_fsdp_mixed_precision(RequestDraft& d, const OptionValue& v, std::string_view name) {
  TF_ASSIGN_OR_RETURN(d.request.fsdp.mixed_precision_bf16,
                      parse_fsdp_mixed_precision(name, as<std::string>(v)));
  return {};
}

void fsdp_mixed_precision_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.fsdp.mixed_precision_bf16) w.add("bf16");
}

std::vector<std::string_view> fsdp_mixed_precision_names() {
  return {"bf16"};
}

Status set_gpu(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.device.gpu = as<std::string>(v);
  return {};
}

void gpu_words(const TrainingRequest& r, const OptionWords& w) {
  if (!r.device.gpu.empty()) w.add(r.device.gpu);
}

Status set_gpu_memory(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.device.gpu_memory_bytes = as<int64_t>(v);
  return {};
}

void gpu_memory_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.device.gpu.empty() && r.device.total_bytes >= 0) w.add(size_arg(r.device.total_bytes));
}

Status set_gpu_profile(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  const auto& file = as<OptionFile>(v);
  TF_ASSIGN_OR_RETURN(GpuProfile profile, parse_gpu_profile(file.text, file.path));
  d.device.gpu_profile = std::make_shared<const GpuProfile>(std::move(profile));
  return {};
}

void gpu_profile_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.device.calibration) w.add(r.device.calibration->file);
}

Status set_link(RequestDraft& d, const OptionValue& v, std::string_view name) {
  TF_ASSIGN_OR_RETURN(d.device.link, parse_enum(kLinkNames, name, as<std::string>(v)));
  return {};
}

void link_words(const TrainingRequest& r, const OptionWords& w) {
  if (!r.device.timing) return;
  const LinkKind link = r.device.timing->link.kind;
  if (link != default_link(r.device.gpu) || w.always) w.add(std::string(kLinkNames.name(link)));
}

Status set_bus_bandwidth(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.device.bus_gbps = as<double>(v);
  return {};
}

void bus_bandwidth_words(const TrainingRequest& r, const OptionWords& w) {
  if (!r.device.timing) return;
  const Link& link = r.device.timing->link;
  if (link.bus_gbps != link_of(link.kind).bus_gbps) w.add(fmt::format("{:g}", link.bus_gbps));
}

Status set_cuda_context(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.device.cuda_context_bytes = as<int64_t>(v);
  return {};
}

void cuda_context_words(const TrainingRequest& r, const OptionWords& w) {
  const DeviceProfile& d = r.device;
  if (d.target.device == Device::kCuda && d.context_source == ContextSource::kGiven) {
    w.add(size_arg(d.context_bytes));
  }
}

Status set_max_split_size(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.max_split_size_bytes = as<int64_t>(v);
  return {};
}

void max_split_size_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.max_split_size_bytes) w.add(size_arg(*r.max_split_size_bytes));
}

Status set_margin(RequestDraft& d, const OptionValue& v, std::string_view /*name*/) {
  d.request.margin = as<double>(v);
  return {};
}

void margin_words(const TrainingRequest& r, const OptionWords& w) {
  if (r.margin) w.add(fmt::format("{:g}%", 100 * *r.margin));
}

using R = RequestCommand;
constexpr RequestCommands kSource = bit(R::kEstimate) | bit(R::kFit) | bit(R::kSummary) |
                                    bit(R::kLaunch) | bit(R::kCompare) | bit(R::kLoader);
// Everything that trains: every command but summary, which lists the model's modules.
constexpr RequestCommands kTrains =
    bit(R::kEstimate) | bit(R::kFit) | bit(R::kLaunch) | bit(R::kCompare) | bit(R::kLoader);
// A recipe to reproduce: the commands that plan the batch and learning rate against it.
constexpr RequestCommands kRecipe = bit(R::kEstimate) | bit(R::kLaunch);
constexpr RequestCommands kSourceButLaunch = kSource & ~bit(R::kLaunch);
constexpr RequestCommands kTrainsButLaunch = kTrains & ~bit(R::kLaunch);
constexpr std::string_view kOneNode = "launch plans the GPUs of one node";
constexpr std::string_view kOneNodeHint = "drop --nodes and --network";
constexpr std::string_view kLaunchChooses =
    "launch chooses the per-GPU batch and accumulation itself";
constexpr std::string_view kLaunchChoosesHint =
    "drop --batch and --grad-accum; give --baseline-batch";

using G = OptionGroup;
using K = OptionKind;
using T = TrainingRequest;

// Every option, in the order request_args writes them. Help is one line; the note says the
// rest, in docs/options.md.
const RequestOption kOptions[] = {
    // The model.
    {.key = "model",
     .group = G::kModel,
     .kind = K::kText,
     .default_text = "",
     .help = "zoo model name (see `trainfit models`)",
     .note = "One of --model, --hf-config and --trace names the model.",
     .commands = kSource,
     .set = set_model,
     .words = model_words},
    {.key = "hf_config",
     .group = G::kModel,
     .kind = K::kFile,
     .default_text = "",
     .help = "a Hugging Face model's config.json, read offline (instead of --model)",
     .note = "Llama, Mistral, Qwen2, Qwen3, Gemma 1 to 3, Phi-3 and Mixtral decoders; --set keys "
             "apply on top of the file's.",
     .commands = kSource,
     .set = set_hf_config,
     .words = hf_config_words,
     .file_what = "config",
     .file_hint = "give the config.json of a Hugging Face model; see examples/*.json"},
    {.key = "trace",
     .group = G::kModel,
     .kind = K::kTrace,
     .default_text = "",
     .help = "a trace of your own model, from `python3 -m trainfit.trace` (instead of --model)",
     .note = "A trace fixes the model, its inputs and its training recipe; the batch, the device "
             "and the optimizer implementation can change. From Python: a trainfit.Trace, a "
             "path, or the dict trainfit.trace returned.",
     .commands = static_cast<RequestCommands>(kSourceButLaunch & ~bit(R::kLoader)),
     .set = set_trace,
     .words = trace_words,
     .file_what = "trace",
     .file_hint = "give the path of a file written by `python3 -m trainfit.trace --out`",
     .refused = bit(R::kLaunch) | bit(R::kLoader),
     .refusal =
         "launch and loader plan a zoo model: a trace has no multi-GPU plan or step time yet",
     .refusal_hint = "use a zoo model, or estimate one GPU: trainfit estimate --trace FILE"},
    {.key = "set",
     .group = G::kModel,
     .kind = K::kKeyValues,
     .default_text = "",
     .help = "model key=value, repeatable (see `trainfit models`)",
     .note = "From Python a dict, {\"num_classes\": 10}; True is true and a list is a,b,c.",
     .commands = kSource,
     .set = set_sets,
     .words = sets_words},
    {.key = "batch",
     .group = G::kModel,
     .kind = K::kInt,
     .default_text = "1",
     .help = "batch size (per GPU)",
     .note = "fit searches the batch when none is given; launch chooses it from --baseline-batch.",
     .commands = kSourceButLaunch,
     .set = set_batch,
     .words = batch_words,
     .refused = bit(R::kLaunch),
     .refusal = kLaunchChooses,
     .refusal_hint = kLaunchChoosesHint},
    {.key = "input",
     .group = G::kModel,
     .kind = K::kShape,
     .default_text = "",
     .help = "image size CxHxW of image models, e.g. 3x224x224",
     .note = "From Python a tuple, (3, 224, 224), or the same text.",
     .commands = kSource,
     .set = set_input,
     .words = input_words},
    {.key = "seq_len",
     .group = G::kModel,
     .kind = K::kInt,
     .default_text = "",
     .help = "tokens per sequence (sequence models)",
     .note = "",
     .commands = kSource,
     .set = set_optional_int<&T::seq_len>,
     .words = optional_int_words<&T::seq_len>},
    {.key = "precision",
     .group = G::kModel,
     .kind = K::kEnum,
     .default_text = "fp32",
     .help = "fp32 | amp-fp16 | amp-bf16 | bf16",
     .note = "amp-*: autocast with fp32 weights (amp-fp16 with a GradScaler); bf16: the model "
             "cast to bfloat16. A trace takes the precision it was traced in: amp-fp16 or "
             "amp-bf16 for one traced with --autocast.",
     .commands = kSource,
     .set = set_enum<kPrecisionNames, &T::precision>,
     .words = enum_words<kPrecisionNames, &T::precision, Precision::kFp32>,
     .choices = names_of<kPrecisionNames>},
    {.key = "device_profile",
     .group = G::kModel,
     .kind = K::kEnum,
     .default_text = "cuda",
     .help = "cuda (PyTorch 2.x CUDA kernels) | cpu (PyTorch 1.13 CPU kernels)",
     .note = "cpu checks the estimate against CPU PyTorch; GPU and allocator options apply to "
             "cuda only.",
     .commands = kSource,
     .set = set_device_profile,
     .words = device_profile_words,
     .choices = names_of<kDeviceNames>},
    {.key = "freeze",
     .group = G::kModel,
     .kind = K::kList,
     .default_text = "",
     .help = "parameter-name prefix that does not train, repeatable (e.g. layer1)",
     .note = "",
     .commands = kSource,
     .set = set_list<&T::freeze>,
     .words = list_words<&T::freeze>},
    {.key = "lora",
     .group = G::kModel,
     .kind = K::kLora,
     .default_text = "",
     .help = "LoRA as peft adds it: r=16,alpha=32,dropout=0.05,target=q_proj,v_proj",
     .note = "LoraConfig's fields. target: module names, or all-linear (default: peft's for the "
             "model, q_proj,v_proj for decoders); adapter_dtype=fp32 (peft's default) or base; "
             "only the adapters train. QLoRA: quant=nf4 (or fp4) loads every Linear but lm_head "
             "in 4 bits as bitsandbytes does, double_quant=true (default) or false; the base "
             "computes in --precision's dtype (give bf16); prepare=true: peft's "
             "prepare_model_for_kbit_training first (the other parameters in fp32). From "
             "Python a dict, {\"r\": 16, \"target\": [\"q_proj\", \"v_proj\"]}, or the same text.",
     .commands = kSource,
     .set = set_lora,
     .words = lora_words},
    // How it trains.
    {.key = "optimizer",
     .group = G::kTraining,
     .kind = K::kEnum,
     .default_text = "",
     .help = "the optimizer (default: the model's training preset, else adamw)",
     .note = "sgd, momentum (SGD, momentum 0.9), adam, adamw, adam8bit and adamw8bit "
             "(bitsandbytes' 8-bit state), paged_adamw and paged_adamw8bit (bitsandbytes' paged "
             "state: unified memory outside PyTorch's allocator). LeRobot's ACT trains with "
             "adamw, Diffusion with adam.",
     .commands = kTrains,
     .set = set_enum<kOptimizerNames, &T::optimizer>,
     .words = optional_enum_words<kOptimizerNames, &T::optimizer>,
     .choices = names_of<kOptimizerNames>},
    {.key = "optimizer_impl",
     .group = G::kTraining,
     .kind = K::kEnum,
     .default_text = "default",
     .help = "default | foreach | fused | loop",
     .note = "default is PyTorch's choice: foreach on CUDA, the for-loop on CPU.",
     .commands = kTrains,
     .set = set_enum<kOptimizerImplNames, &T::optimizer_impl>,
     .words = enum_words<kOptimizerImplNames, &T::optimizer_impl, OptimizerImpl::kDefault>,
     .choices = names_of<kOptimizerImplNames>},
    {.key = "default_device",
     .group = G::kTraining,
     .kind = K::kEnum,
     .default_text = "cpu",
     .help = "where tensors made without a device go (torch.set_default_device)",
     .note = "Under cuda Adam's step counters are GPU scalars, and its foreach step reads each "
             "back twice with .item() (the for-loop once), each read a wait for the GPU.",
     .commands = kTrains,
     .set = set_default_device,
     .words = default_device_words,
     .choices = default_device_names},
    {.key = "weight_decay",
     .group = G::kTraining,
     .kind = K::kFloat,
     .default_text = "",
     .help = "weight decay (default: the preset's, else torch's: 0.01 for adamw, 0 otherwise)",
     .note = "",
     .commands = kTrains,
     .set = set_optional_float<&T::weight_decay>,
     .words = weight_decay_words},
    {.key = "checkpoint",
     .group = G::kTraining,
     .kind = K::kList,
     .default_text = "",
     .help = "module pattern under activation checkpointing, repeatable (e.g. 'layer3')",
     .note = "Non-reentrant unless --checkpoint-reentrant. '*' matches one path component: "
             "'encoder.layers.*'.",
     .commands = kTrains,
     .set = set_list<&T::checkpoint>,
     .words = list_words<&T::checkpoint>},
    {.key = "checkpoint_reentrant",
     .group = G::kTraining,
     .kind = K::kBool,
     .default_text = "false",
     .help = "checkpoint with use_reentrant=True (transformers' default)",
     .note = "Decoders then make their input embeddings require grad, as peft's "
             "enable_input_require_grads does.",
     .commands = kTrains,
     .set = set_bool<&T::checkpoint_reentrant>,
     .words = bool_words<&T::checkpoint_reentrant>},
    {.key = "grad_accum",
     .group = G::kTraining,
     .kind = K::kInt,
     .default_text = "1",
     .help = "micro-batches of --batch per optimizer step",
     .note = "",
     .commands = kTrainsButLaunch,
     .set = set_int<&T::grad_accum>,
     .words = int_words<&T::grad_accum, 1>,
     .refused = bit(R::kLaunch),
     .refusal = kLaunchChooses,
     .refusal_hint = kLaunchChoosesHint},
    {.key = "grad_scaler_skips",
     .group = G::kTraining,
     .kind = K::kInt,
     .default_text = "0",
     .help = "with amp-fp16: the first N optimizer steps GradScaler skips",
     .note = "Inf gradients at its initial scale: no update, no optimizer state yet. To compare "
             "with a measurement of a run's first iterations.",
     .commands = kTrains,
     .set = set_int<&T::grad_scaler_skips>,
     .words = int_words<&T::grad_scaler_skips, 0>},
    {.key = "cudnn_benchmark",
     .group = G::kTraining,
     .kind = K::kBool,
     .default_text = "false",
     .help = "torch.backends.cudnn.benchmark = True",
     .note = "The first iteration times every cuDNN plan of each convolution, each with its "
             "workspace, then empties the cache.",
     .commands = kTrains,
     .set = set_switch<&StepSwitches::cudnn_benchmark>,
     .words = switch_words<&StepSwitches::cudnn_benchmark>},
    {.key = "zero_grad_set_to_none",
     .group = G::kTraining,
     .kind = K::kBool,
     .default_text = "true",
     .help = "optimizer.zero_grad(set_to_none=...); off: gradients zeroed in place, kept",
     .note = "PyTorch 2.x frees the gradients by default; with set_to_none=False (1.x's "
             "default, and many older scripts) they stay allocated through the next forward, "
             "and the next backward adds into them. One GPU only for now.",
     .commands = kTrainsButLaunch,
     .set = set_switch<&StepSwitches::zero_grad_set_to_none>,
     .words = switch_words<&StepSwitches::zero_grad_set_to_none>,
     .refused = bit(R::kLaunch),
     .refusal = "launch plans DDP, where --no-zero-grad-set-to-none is not modelled yet",
     .refusal_hint = "drop it"},
    {.key = "loop",
     .group = G::kTraining,
     .kind = K::kEnum,
     .default_text = "held",
     .help = "held | scoped: what the training loop keeps of a step",
     .note = "held: `for x, y in loader: out = model(x); loss = ...` holds the batch, the output "
             "and the loss to the step's end; scoped: a step function makes the batch and "
             "returns the loss, so the batch and the output go when it returns.",
     .commands = kTrains,
     .set = set_enum<kLoopStyleNames, &T::loop>,
     .words = enum_words<kLoopStyleNames, &T::loop, LoopStyle::kHeld>,
     .choices = names_of<kLoopStyleNames>},
    // More than one GPU.
    {.key = "gpus",
     .group = G::kMultiGpu,
     .kind = K::kInt,
     .default_text = "1",
     .help = "GPUs training together, --batch each; memory figures are one rank's",
     .note = "",
     .commands = kTrains,
     .set = set_int<&T::gpus>,
     .words = int_words<&T::gpus, 1>},
    {.key = "nodes",
     .group = G::kMultiGpu,
     .kind = K::kInt,
     .default_text = "1",
     .help = "machines of --gpus GPUs each (torchrun --nnodes)",
     .note = "The world size is GPUs x nodes, and the all-reduce crosses --network.",
     .commands = kTrainsButLaunch,
     .set = set_int<&T::nodes>,
     .words = int_words<&T::nodes, 1>,
     .refused = bit(R::kLaunch),
     .refusal = kOneNode,
     .refusal_hint = kOneNodeHint},
    {.key = "network",
     .group = G::kMultiGpu,
     .kind = K::kFloat,
     .default_text = "",
     .help = "bandwidth between nodes in Gbit/s per node (default 100)",
     .note = "With several NICs give their total, e.g. 800 for 4 x 200 Gb/s InfiniBand.",
     .commands = kTrainsButLaunch,
     .set = set_optional_float<&T::network_gbits>,
     .words = optional_float_words<&T::network_gbits>,
     .refused = bit(R::kLaunch),
     .refusal = kOneNode,
     .refusal_hint = kOneNodeHint},
    {.key = "strategy",
     .group = G::kMultiGpu,
     .kind = K::kEnum,
     .default_text = "",
     .help = "ddp (the default with --gpus 2 or more) | zero1 | fsdp",
     .note = "zero1: DDP with torch's ZeroRedundancyOptimizer (optimizer state sharded); fsdp: "
             "FullyShardedDataParallel (parameters, gradients and optimizer state sharded); "
             "zero2 and zero3 are refused until they are modelled.",
     .commands = kTrains,
     .set = set_enum<kStrategyNames, &T::strategy>,
     .words = optional_enum_words<kStrategyNames, &T::strategy>,
     .choices = names_of<kStrategyNames>},
    {.key = "bucket_cap_mb",
     .group = G::kMultiGpu,
     .kind = K::kFloat,
     .default_text = "",
     .help = "DDP's bucket_cap_mb (default 25)",
     .note = "",
     .commands = kTrains,
     .set = set_bucket_cap_mb,
     .words = bucket_cap_mb_words},
    {.key = "gradient_as_bucket_view",
     .group = G::kMultiGpu,
     .kind = K::kBool,
     .default_text = "false",
     .help = "DDP(gradient_as_bucket_view=True): .grad lives in the buckets",
     .note = "Saves one copy of the gradients.",
     .commands = kTrains,
     .set = set_gradient_as_bucket_view,
     .words = gradient_as_bucket_view_words},
    {.key = "fsdp_wrap",
     .group = G::kMultiGpu,
     .kind = K::kList,
     .default_text = "",
     .help = "FSDP: module pattern wrapped as its own unit, repeatable or comma-separated",
     .note = "auto_wrap_policy, e.g. 'encoder.layers.*' or 'layer1,layer2'; without it the "
             "whole model is one unit.",
     .commands = kTrains,
     .set = set_fsdp_wrap,
     .words = fsdp_wrap_words},
    {.key = "fsdp_sharding",
     .group = G::kMultiGpu,
     .kind = K::kEnum,
     .default_text = "",
     .help = "FSDP's sharding_strategy: full_shard (the default) | shard_grad_op",
     .note = "full_shard regathers the parameters for backward; shard_grad_op keeps them from "
             "forward to backward.",
     .commands = kTrains,
     .set = set_fsdp_sharding,
     .words = fsdp_sharding_words,
     .choices = names_of<kFsdpShardingNames>},
    {.key = "fsdp_mixed_precision",
     .group = G::kMultiGpu,
     .kind = K::kEnum,
     .default_text = "",
     .help = "FSDP: bf16 for MixedPrecision in bfloat16 on an fp32 model",
     .note = "param_dtype, reduce_dtype and buffer_dtype = torch.bfloat16: the shards and the "
             "optimizer state stay fp32, the model computes in bf16.",
     .commands = kTrains,
     .set = set_fsdp_mixed_precision,
     .words = fsdp_mixed_precision_words,
     .choices = fsdp_mixed_precision_names},
    {.key = "find_unused_parameters",
     .group = G::kMultiGpu,
     .kind = K::kBool,
     .default_text = "false",
     .help = "DDP(find_unused_parameters=True): buckets stay in parameter order",
     .note = "",
     .commands = kTrains,
     .set = set_find_unused_parameters,
     .words = find_unused_parameters_words},
    {.key = "broadcast_buffers",
     .group = G::kMultiGpu,
     .kind = K::kBool,
     .default_text = "true",
     .help = "DDP's broadcast_buffers; off (--no-broadcast-buffers): no flat copy of the buffers",
     .note = "",
     .commands = kTrains,
     .set = set_broadcast_buffers,
     .words = broadcast_buffers_words},
    // Step time.
    {.key = "tf32",
     .group = G::kTraining,
     .kind = K::kBool,
     .default_text = "false",
     .help = "fp32 matmuls in TF32 (torch.backends.cuda.matmul.allow_tf32)",
     .note = "Off by default in PyTorch; convolutions use TF32 by default (cudnn.allow_tf32).",
     .commands = kTrains,
     .set = set_bool<&T::tf32>,
     .words = bool_words<&T::tf32>},
    {.key = "memory_format",
     .group = G::kTraining,
     .kind = K::kEnum,
     .default_text = "channels_first",
     .help = "channels_first | channels_last: the step time of convolutions under AMP",
     .note = "channels_last: the model and inputs .to(memory_format=torch.channels_last).",
     .commands = kTrains,
     .set = set_enum<kMemoryFormatNames, &T::memory_format>,
     .words = enum_words<kMemoryFormatNames, &T::memory_format, MemoryFormat::kChannelsFirst>,
     .choices = names_of<kMemoryFormatNames>},
    {.key = "dataset_size",
     .group = G::kTraining,
     .kind = K::kInt,
     .default_text = "",
     .help = "samples in one epoch: adds the epoch time",
     .note = "",
     .commands = kTrains,
     .set = set_optional_int<&T::dataset_size>,
     .words = optional_int_words<&T::dataset_size>},
    // The recipe a run reproduces.
    {.key = "baseline_batch",
     .group = G::kBaseline,
     .kind = K::kInt,
     .default_text = "",
     .help = "the effective batch the paper or config trained with",
     .note = "Compared with --batch x --gpus x --grad-accum, with what reaches it.",
     .commands = kRecipe,
     .set = set_optional_int<&T::baseline_batch>,
     .words = optional_int_words<&T::baseline_batch>},
    {.key = "baseline_lr",
     .group = G::kBaseline,
     .kind = K::kFloat,
     .default_text = "",
     .help = "its learning rate, scaled to this run's effective batch",
     .note = "Linear for SGD, square root for Adam.",
     .commands = kRecipe,
     .set = set_optional_float<&T::baseline_lr>,
     .words = optional_float_words<&T::baseline_lr>},
    // The device.
    {.key = "gpu",
     .group = G::kDevice,
     .kind = K::kText,
     .default_text = "",
     .help = "GPU from the catalog (see `trainfit gpus`): decides fit and headroom",
     .note = "",
     .commands = kTrains,
     .set = set_gpu,
     .words = gpu_words},
    {.key = "gpu_memory",
     .group = G::kDevice,
     .kind = K::kSize,
     .default_text = "",
     .help = "memory of a GPU not in the catalog, e.g. 24GiB",
     .note = "From Python also an int of bytes.",
     .commands = static_cast<RequestCommands>(kTrainsButLaunch & ~bit(R::kLoader)),
     .set = set_gpu_memory,
     .words = gpu_memory_words,
     .refused = bit(R::kLaunch) | bit(R::kLoader),
     .refusal = "launch and loader need a GPU of the catalog, for its step time",
     .refusal_hint = "give --gpu NAME (see `trainfit gpus`)"},
    {.key = "gpu_profile",
     .group = G::kDevice,
     .kind = K::kFile,
     .default_text = "",
     .help = "step-time constants measured on your GPU (python3 -m trainfit.calibrate)",
     .note = "With --gpu, the card it was measured on; without it, that card's memory.",
     .commands = kTrains,
     .set = set_gpu_profile,
     .words = gpu_profile_words,
     .file_what = "GPU profile",
     .file_hint = "write it with `python3 -m trainfit.calibrate --out FILE` on the machine "
                  "that trains"},
    {.key = "link",
     .group = G::kDevice,
     .kind = K::kEnum,
     .default_text = "",
     .help = "what connects the GPUs (default: the GPU's usual one)",
     .note = "pcie3, pcie4, pcie5, nvlink2, nvlink3 or nvlink4: sets the all-reduce's bus "
             "bandwidth.",
     .commands = kTrains,
     .set = set_link,
     .words = link_words,
     .choices = names_of<kLinkNames>},
    {.key = "bus_bandwidth",
     .group = G::kDevice,
     .kind = K::kFloat,
     .default_text = "",
     .help = "the all-reduce bus bandwidth in GB/s, as nccl-tests' all_reduce_perf prints it",
     .note = "busbw at 128 MiB or more: replaces the link's figure.",
     .commands = kTrains,
     .set = set_bus_bandwidth,
     .words = bus_bandwidth_words},
    {.key = "cuda_context",
     .group = G::kDevice,
     .kind = K::kSize,
     .default_text = "",
     .help = "memory outside PyTorch's allocator (default 500MiB)",
     .note = "The CUDA context, kernels and library handles.",
     .commands = kTrains,
     .set = set_cuda_context,
     .words = cuda_context_words},
    {.key = "expandable_segments",
     .group = G::kDevice,
     .kind = K::kBool,
     .default_text = "false",
     .help = "model PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
     .note = "",
     .commands = kTrains,
     .set = set_bool<&T::expandable_segments>,
     .words = bool_words<&T::expandable_segments>},
    {.key = "max_split_size",
     .group = G::kDevice,
     .kind = K::kSize,
     .default_text = "",
     .help = "model PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb (e.g. 128MiB)",
     .note = "",
     .commands = kTrains,
     .set = set_max_split_size,
     .words = max_split_size_words},
    {.key = "margin",
     .group = G::kDevice,
     .kind = K::kFraction,
     .default_text = "",
     .help = "share of the GPU's memory kept free, e.g. 0.05 or 5% (estimate 0, fit 5%)",
     .note = "",
     .commands = kTrains,
     .set = set_margin,
     .words = margin_words},
};

}  // namespace

void OptionWords::add(std::string value) const {
  out->emplace_back(flag);
  out->push_back(std::move(value));
}

void OptionWords::add_flag() const {
  out->emplace_back(flag);
}

std::span<const RequestOption> request_options() {
  return kOptions;
}

const RequestOption* find_request_option(std::string_view key) {
  for (const RequestOption& o : kOptions) {
    if (o.key == key) return &o;
  }
  return nullptr;
}

std::vector<const RequestOption*> request_options_of(RequestCommand command) {
  std::vector<const RequestOption*> out;
  for (const RequestOption& o : kOptions) {
    if (((o.commands | o.refused) & bit(command)) != 0) out.push_back(&o);
  }
  return out;
}

std::string option_flag(const RequestOption& option) {
  std::string flag =
      option.kind == OptionKind::kBool && option.default_text == "true" ? "--no-" : "--";
  for (const char c : option.key) flag += c == '_' ? '-' : c;
  return flag;
}

std::string option_flag(std::string_view key) {
  const RequestOption* option = find_request_option(key);
  TF_CHECK(option != nullptr) << "no request option '" << key << "'";
  return option_flag(*option);
}

std::vector<std::string> option_words(std::string_view key, const TrainingRequest& request,
                                      bool always) {
  const RequestOption* option = find_request_option(key);
  TF_CHECK(option != nullptr) << "no request option '" << key << "'";
  std::vector<std::string> words;
  const std::string flag = option_flag(*option);
  option->words(request, OptionWords{.out = &words, .flag = flag, .always = always});
  return words;
}

Result<LoraConfig> parse_lora(std::string_view text) {
  TF_ASSIGN_OR_RETURN(const OptionFields fields, split_lora(text));
  return lora_from_fields(fields);
}

std::vector<std::string> request_args(const TrainingRequest& request) {
  std::vector<std::string> words;
  for (const RequestOption& o : kOptions) {
    const std::string flag = option_flag(o);
    o.words(request, OptionWords{.out = &words, .flag = flag});
  }
  return words;
}

Result<OptionValue> option_value_from_text(const RequestOption& option, std::string_view name,
                                           const std::vector<std::string>& texts) {
  TF_CHECK(!texts.empty()) << "no text for " << name;
  const std::string& text = texts.back();
  switch (option.kind) {
    case OptionKind::kBool:
      if (text == "true") return OptionValue{true};
      if (text == "false") return OptionValue{false};
      return invalid_argument(fmt::format("{} '{}' is not true or false", name, text),
                              fmt::format("for example {} true", name));
    case OptionKind::kInt: {
      const std::optional<int64_t> n = parse_whole(text);
      if (!n) {
        return invalid_argument(fmt::format("{} '{}' is not a whole number", name, text),
                                fmt::format("for example {} 8", name));
      }
      return OptionValue{*n};
    }
    case OptionKind::kFloat: {
      const std::optional<double> x = parse_number(text);
      if (!x) {
        return invalid_argument(fmt::format("{} '{}' is not a number", name, text),
                                fmt::format("for example {} 0.5", name));
      }
      return OptionValue{*x};
    }
    case OptionKind::kSize: {
      TF_ASSIGN_OR_RETURN(const int64_t bytes, parse_size(name, text));
      return OptionValue{bytes};
    }
    case OptionKind::kFraction: {
      TF_ASSIGN_OR_RETURN(const double share, parse_margin(name, text));
      return OptionValue{share};
    }
    case OptionKind::kEnum:
    case OptionKind::kText:
      return OptionValue{text};
    case OptionKind::kShape: {
      Result<Dims> dims = parse_dims(text);
      if (!dims.ok()) {
        return invalid_argument(fmt::format("{} '{}': {}", name, text, dims.status().message()),
                                "use CxHxW, for example 3x224x224");
      }
      return OptionValue{*std::move(dims)};
    }
    case OptionKind::kList:
      return OptionValue{texts};
    case OptionKind::kKeyValues: {
      OptionFields fields;
      for (const std::string& s : texts) {
        const size_t eq = s.find('=');
        if (eq == std::string::npos || eq == 0) {
          return invalid_argument(fmt::format("{} '{}' is not key=value", name, s),
                                  fmt::format("for example {} num_classes=10", name));
        }
        fields.emplace_back(s.substr(0, eq), s.substr(eq + 1));
      }
      return OptionValue{std::move(fields)};
    }
    case OptionKind::kLora: {
      TF_ASSIGN_OR_RETURN(OptionFields fields, split_lora(text));
      return OptionValue{std::move(fields)};
    }
    case OptionKind::kFile:
    case OptionKind::kTrace:
      break;
  }
  TF_CHECK(false) << name << ": files are read by the front end";
  return OptionValue{};
}

Status set_request_option(RequestDraft& draft, const RequestOption& option, RequestCommand command,
                          const OptionValue& value, std::string_view name) {
  if ((option.refused & bit(command)) != 0) {
    return invalid_argument(std::string(option.refusal), std::string(option.refusal_hint));
  }
  if ((option.commands & bit(command)) == 0) {
    return invalid_argument(
        fmt::format("{} does not apply to {}", name, kRequestCommandNames.name(command)),
        fmt::format("drop {}", name));
  }
  return option.set(draft, value, name);
}

Result<TrainingRequest> finish_request(RequestDraft draft) {
  TrainingRequest& r = draft.request;
  if (draft.hf_config) {
    TF_RETURN_IF_ERROR(
        use_hf_config(r, std::move(draft.hf_config->first), std::move(draft.hf_config->second)));
  }
  TF_ASSIGN_OR_RETURN(r.device, choose_device(draft.device));
  return std::move(r);
}

Result<OptionFields> split_lora(std::string_view text) {
  OptionFields fields;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    start = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      // A bare item continues target's list: target=q_proj,v_proj.
      if (fields.empty() || fields.back().first != "target") {
        return invalid_argument(
            fmt::format("--lora '{}': '{}' is not key=value", text, item),
            "for example --lora r=16,alpha=32,dropout=0.05,target=q_proj,v_proj");
      }
      if (item.empty()) {
        return invalid_argument(fmt::format("--lora '{}' has an empty target", text),
                                "name modules, e.g. target=q_proj,v_proj or target=all-linear");
      }
      std::get<std::vector<std::string>>(fields.back().second).emplace_back(item);
      continue;
    }
    std::string key(item.substr(0, eq));
    const std::string value(item.substr(eq + 1));
    if (key == "target") {
      if (value.empty()) {
        return invalid_argument(fmt::format("--lora '{}' has an empty target", text),
                                "name modules, e.g. target=q_proj,v_proj or target=all-linear");
      }
      if (!fields.empty() && fields.back().first == "target") {
        std::get<std::vector<std::string>>(fields.back().second).push_back(value);
      } else {
        fields.emplace_back(std::move(key), std::vector<std::string>{value});
      }
    } else {
      fields.emplace_back(std::move(key), value);
    }
  }
  return fields;
}

namespace {

// A LoRA field's number: Python's int or float, or text.
Result<double> lora_number(const std::string& key, const FieldValue& value) {
  if (const auto* n = std::get_if<int64_t>(&value)) return static_cast<double>(*n);
  if (const auto* x = std::get_if<double>(&value)) return *x;
  std::optional<double> parsed;
  if (const auto* s = std::get_if<std::string>(&value)) parsed = parse_number(*s);
  if (!parsed) {
    return invalid_argument(fmt::format("--lora {}='{}' is not a number", key, field_text(value)),
                            "for example --lora r=16,alpha=32,dropout=0.05");
  }
  return *parsed;
}

// A LoRA field's switch: Python's bool, or true/false.
Result<bool> lora_switch(const std::string& key, const FieldValue& value, std::string_view hint) {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  const std::string text = field_text(value);
  if (text == "true" || text == "false") return text == "true";
  return invalid_argument(fmt::format("--lora {}='{}' is not true or false", key, text),
                          std::string(hint));
}

}  // namespace

Result<LoraConfig> lora_from_fields(const OptionFields& fields) {
  LoraConfig lora;
  for (const auto& [key, value] : fields) {
    if (key == "r") {
      TF_ASSIGN_OR_RETURN(const double r, lora_number(key, value));
      if (r != std::floor(r) || r < 1 || r > static_cast<double>(int64_t{1} << 20)) {
        return invalid_argument(fmt::format("--lora r={} is not a rank", field_text(value)),
                                "give a whole number, e.g. --lora r=16");
      }
      lora.rank = static_cast<int64_t>(r);
    } else if (key == "alpha") {
      TF_ASSIGN_OR_RETURN(lora.alpha, lora_number(key, value));
    } else if (key == "dropout") {
      TF_ASSIGN_OR_RETURN(lora.dropout, lora_number(key, value));
    } else if (key == "target") {
      const auto* list = std::get_if<std::vector<std::string>>(&value);
      std::vector<std::string> names =
          list != nullptr ? *list : std::vector<std::string>{field_text(value)};
      for (std::string& name : names) {
        if (name.empty()) {
          return invalid_argument("--lora has an empty target",
                                  "name modules, e.g. target=q_proj,v_proj or target=all-linear");
        }
        lora.target.push_back(std::move(name));
      }
    } else if (key == "adapter_dtype") {
      const std::string dtype = field_text(value);
      if (dtype != "fp32" && dtype != "base") {
        return invalid_argument(fmt::format("--lora adapter_dtype='{}' is not fp32 or base", dtype),
                                "fp32: peft's default (autocast_adapter_dtype=True); base: the "
                                "dtype of the layer adapted");
      }
      lora.fp32_adapters = dtype == "fp32";
    } else if (key == "quant") {
      const std::string quant = field_text(value);
      if (quant == "nf4") {
        lora.quant = LoraConfig::Quant::kNf4;
      } else if (quant == "fp4") {
        lora.quant = LoraConfig::Quant::kFp4;
      } else if (quant == "none") {
        lora.quant = LoraConfig::Quant::kOff;
      } else {
        return invalid_argument(fmt::format("--lora quant='{}' is not nf4, fp4 or none", quant),
                                "nf4: QLoRA's 4-bit base (bnb_4bit_quant_type=\"nf4\")");
      }
    } else if (key == "double_quant") {
      TF_ASSIGN_OR_RETURN(
          lora.double_quant,
          lora_switch(key, value, "true: bnb_4bit_use_double_quant=True, QLoRA's recipe"));
    } else if (key == "prepare") {
      TF_ASSIGN_OR_RETURN(
          lora.prepare,
          lora_switch(key, value,
                      "true: peft's prepare_model_for_kbit_training before get_peft_model"));
    } else {
      return invalid_argument(
          fmt::format("--lora has no key '{}'", key),
          "keys: r, alpha, dropout, target, adapter_dtype, quant, double_quant, prepare");
    }
  }
  return lora;
}

}  // namespace trainfit
