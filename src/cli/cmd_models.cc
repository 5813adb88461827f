// trainfit models: the model zoo with each model's input and --set keys.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

std::string default_input(const ModelSpec& m) {
  switch (m.input) {
    case InputKind::kImage:
      return fmt::format("default --input {}", shape_string(m.default_input));
    case InputKind::kSequence:
      return fmt::format("default --seq-len {}", m.default_seq_len);
    case InputKind::kConfigured:
      return "inputs from the --set keys";
  }
  return "";
}

std::string default_text(const SetKey& k) {
  return k.default_doc.empty() ? attr_value_string(k.default_value) : k.default_doc;
}

int run_models(bool json, std::ostream& out) {
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const ModelSpec& m : model_zoo()) {
      nlohmann::json keys = nlohmann::json::array();
      for (const SetKey& k : m.keys) {
        nlohmann::json key{{"name", k.name},
                           {"type", attr_kind_name(k.kind)},
                           {"default", default_text(k)},
                           {"doc", k.doc}};
        if (!k.choices.empty()) key["choices"] = k.choices;
        keys.push_back(std::move(key));
      }
      nlohmann::json entry{{"name", m.name}, {"family", m.family}, {"doc", m.doc}, {"keys", keys}};
      if (m.input == InputKind::kImage) entry["default_input"] = m.default_input;
      if (m.input == InputKind::kSequence) entry["default_seq_len"] = m.default_seq_len;
      if (m.optimizer) {
        entry["optimizer_preset"] = {{"optimizer", optimizer_name(m.optimizer->kind)},
                                     {"weight_decay", m.optimizer->weight_decay},
                                     {"doc", m.optimizer->doc}};
      }
      j.push_back(std::move(entry));
    }
    out << nlohmann::json{{"models", j}}.dump(2) << '\n';
    return kExitOk;
  }
  std::string family;
  for (const ModelSpec& m : model_zoo()) {
    if (m.family != family) {
      family = m.family;
      out << '\n' << family << '\n';
    }
    out << fmt::format("  {:<14} {}\n", m.name, m.doc);
    out << fmt::format("  {:<14} {}", "", default_input(m));
    if (!m.keys.empty()) out << "; --set keys:";
    out << '\n';
    for (const SetKey& k : m.keys) {
      std::string choices;
      if (!k.choices.empty()) choices = fmt::format(" [{}]", fmt::join(k.choices, "|"));
      out << fmt::format("  {:<14}   {}={}{}  {}\n", "", k.name, default_text(k), choices, k.doc);
    }
    if (m.optimizer) out << fmt::format("  {:<14} optimizer: {}\n", "", m.optimizer->doc);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_models(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "print one JSON object");
  return [json](std::ostream& out, std::ostream&) { return run_models(*json, out); };
}

}  // namespace trainfit
