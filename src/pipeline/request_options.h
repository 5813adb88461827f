// Every option of a training request, declared once: its key, group, kind, default, help, the
// commands that take it, and a typed setter and getter. The command line registers its flags
// from this table (cli/request_cli.h), the Python binding converts keywords with it,
// `request_args` turns a request back into flags with it, and docs/options.md is printed from it.
//
//   RequestDraft draft;
//   const RequestOption& o = *find_request_option("precision");
//   TF_RETURN_IF_ERROR(o.set(draft, OptionValue{std::string("amp-bf16")}, "--precision"));
//   Result<TrainingRequest> r = finish_request(std::move(draft));
//   request_args(*r);   // --batch 1 --precision amp-bf16
//
// A new option is one row in request_options.cc (and a TrainingRequest field, and a
// TrainingConfig field if the lowering reads it). The command line spells a key as `--` plus
// the key in kebab case (`--no-` plus it for a switch that is on by default); Python spells it
// as the key.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "pipeline/request.h"

namespace trainfit {

// The commands that take request options, as bits of a set.
enum class RequestCommand : uint8_t {
  kEstimate = 1,
  kFit = 2,
  kSummary = 4,
  kLaunch = 8,
  kCompare = 16,
  kLoader = 32,
};
inline constexpr auto kRequestCommandNames = enum_names<RequestCommand>({
    {RequestCommand::kEstimate, "estimate"},
    {RequestCommand::kFit, "fit"},
    {RequestCommand::kSummary, "summary"},
    {RequestCommand::kLaunch, "launch"},
    {RequestCommand::kCompare, "compare"},
    {RequestCommand::kLoader, "loader"},
});
using RequestCommands = uint8_t;
constexpr RequestCommands bit(RequestCommand c) {
  return static_cast<RequestCommands>(c);
}

// How `--help` and the docs group the options.
enum class OptionGroup : uint8_t { kModel, kTraining, kMultiGpu, kBaseline, kDevice };
inline constexpr auto kOptionGroupNames = enum_names<OptionGroup>({
    {OptionGroup::kModel, "model"},
    {OptionGroup::kTraining, "training"},
    {OptionGroup::kMultiGpu, "multi-GPU"},
    {OptionGroup::kBaseline, "baseline"},
    {OptionGroup::kDevice, "device"},
});

// What a value is; each front end turns its input into the OptionValue the kind names.
enum class OptionKind : uint8_t {
  kBool,       // bool: a flag on the command line
  kInt,        // int64_t
  kFloat,      // double
  kSize,       // int64_t bytes: "24GiB" or, from Python, an int of bytes
  kFraction,   // double: "0.05" or "5%"
  kEnum,       // std::string, one of the row's choices
  kText,       // std::string
  kShape,      // Dims: "3x224x224" or, from Python, a tuple of ints
  kList,       // std::vector<std::string>: repeatable, or a list
  kKeyValues,  // OptionFields: key=value, repeatable, or a dict
  kLora,       // OptionFields: "r=16,target=q_proj,v_proj" or a dict of LoraConfig's fields
  kFile,       // OptionFile: a path whose text the setter parses
  kTrace,      // OptionFile, or an OptionTrace already loaded
};
inline constexpr auto kOptionKindNames = enum_names<OptionKind>({
    {OptionKind::kBool, "bool"},
    {OptionKind::kInt, "int"},
    {OptionKind::kFloat, "float"},
    {OptionKind::kSize, "size"},
    {OptionKind::kFraction, "fraction"},
    {OptionKind::kEnum, "enum"},
    {OptionKind::kText, "text"},
    {OptionKind::kShape, "shape"},
    {OptionKind::kList, "list"},
    {OptionKind::kKeyValues, "key=value"},
    {OptionKind::kLora, "lora"},
    {OptionKind::kFile, "file"},
    {OptionKind::kTrace, "trace"},
});

// A field of a structured value (a --set key, a LoRA field), typed as Python gave it; the
// command line gives text.
using FieldValue = std::variant<bool, int64_t, double, std::string, std::vector<std::string>>;
using OptionFields = std::vector<std::pair<std::string, FieldValue>>;
struct OptionFile {
  std::string path;  // as the user named it: errors and command lines show it
  std::string text;
};
struct OptionTrace {
  std::shared_ptr<const TraceModel> model;
  std::string source;
};
using OptionValue = std::variant<bool, int64_t, double, std::string, Dims, std::vector<std::string>,
                                 OptionFields, OptionFile, OptionTrace>;

// A request being built from options in any order; finish_request checks what spans several.
struct RequestDraft {
  TrainingRequest request;
  DeviceChoice device;  // made into request.device by finish_request
  // A config.json, parsed, and its path: applied once every option is read.
  std::optional<std::pair<HfModel, std::string>> hf_config;
};

// Where an option's getter writes the flag and value(s) that rebuild a request's setting:
// nothing where the request holds the default, unless `always`.
struct OptionWords {
  std::vector<std::string>* out;
  std::string_view flag;
  bool always = false;

  void add(std::string value) const;  // the flag, then `value`
  void add_flag() const;              // the flag alone
};

struct RequestOption {
  std::string_view key;  // Python's keyword; the flag is --key-in-kebab-case
  OptionGroup group;
  OptionKind kind;
  std::string_view default_text;  // as --help and the docs show it; "" where there is none
  std::string_view help;          // one line
  std::string_view note;          // more, for docs/options.md; may be empty
  RequestCommands commands;       // the commands that take it
  // Sets the draft from a value of `kind`; `name` is the option as the user spelled it
  // (--precision or precision), for errors.
  Status (*set)(RequestDraft& draft, const OptionValue& value, std::string_view name);
  // The flag and its value(s) that rebuild the request's setting.
  void (*words)(const TrainingRequest& request, const OptionWords& out);
  // kEnum: the names it takes.
  std::vector<std::string_view> (*choices)() = nullptr;
  // A file: what it is, in "cannot open config 'PATH'", and how to make one.
  std::string_view file_what;
  std::string_view file_hint;
  // Commands that parse it only to refuse it, and why (launch chooses the batch itself).
  RequestCommands refused = 0;
  std::string_view refusal;
  std::string_view refusal_hint;
};

// Every option, in the order request_args writes them.
std::span<const RequestOption> request_options();
const RequestOption* find_request_option(std::string_view key);
// The options `command` takes (refused ones included).
std::vector<const RequestOption*> request_options_of(RequestCommand command);

// "--seq-len" for "seq_len"; a switch that is on by default: "--no-broadcast-buffers".
std::string option_flag(const RequestOption& option);
// The flag of the option `key` names; the key must be in the table.
std::string option_flag(std::string_view key);
// The words one option gives `request` (see OptionWords).
std::vector<std::string> option_words(std::string_view key, const TrainingRequest& request,
                                      bool always = false);

// A value of `option`'s kind from command-line text (each occurrence, for a list); files are
// read by the caller. `name` spells the option in errors.
Result<OptionValue> option_value_from_text(const RequestOption& option, std::string_view name,
                                           const std::vector<std::string>& texts);

// Sets `value`, first refusing an option `command` does not take.
Status set_request_option(RequestDraft& draft, const RequestOption& option, RequestCommand command,
                          const OptionValue& value, std::string_view name);

// The request, with its device chosen and its config.json applied.
Result<TrainingRequest> finish_request(RequestDraft draft);

// The request as `trainfit estimate` arguments that build it again, defaults left out: what
// `fit` prints to reproduce a row.
std::vector<std::string> request_args(const TrainingRequest& request);

// --lora's value, peft's LoraConfig fields: "r=16,alpha=32,dropout=0.05,target=q_proj,v_proj".
// Keys: r (8), alpha (8), dropout (0), target (module names, or all-linear; default: peft's for
// the model), adapter_dtype (fp32, as get_peft_model casts bf16 adapters; or base), quant (nf4 or
// fp4: QLoRA's 4-bit base; none), double_quant (true) and prepare (false; true:
// prepare_model_for_kbit_training's fp32 casts). split_lora reads the text into fields (a bare
// item continues target's list), which Python gives as a dict; lora_from_fields checks them.
Result<LoraConfig> parse_lora(std::string_view text);
Result<OptionFields> split_lora(std::string_view text);
Result<LoraConfig> lora_from_fields(const OptionFields& fields);

}  // namespace trainfit
