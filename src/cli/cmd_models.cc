// trainfit models: the model zoo with each model's input and --set keys.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "zoo/zoo.h"

namespace trainfit {
namespace {

std::string default_input(const ModelSpec& m) {
  if (m.input == InputKind::kImage) return fmt::format("--input {}", shape_string(m.default_input));
  return fmt::format("--seq-len {}", m.default_seq_len);
}

int run_models(bool json, std::ostream& out) {
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const ModelSpec& m : model_zoo()) {
      nlohmann::json keys = nlohmann::json::array();
      for (const SetKey& k : m.keys) {
        nlohmann::json key{{"name", k.name},
                           {"type", attr_kind_name(k.kind)},
                           {"default", attr_value_string(k.default_value)},
                           {"doc", k.doc}};
        if (!k.choices.empty()) key["choices"] = k.choices;
        keys.push_back(std::move(key));
      }
      nlohmann::json entry{{"name", m.name}, {"family", m.family}, {"doc", m.doc}, {"keys", keys}};
      if (m.input == InputKind::kImage)
        entry["default_input"] = m.default_input;
      else
        entry["default_seq_len"] = m.default_seq_len;
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
    out << fmt::format("  {:<14} default {}", "", default_input(m));
    if (!m.keys.empty()) out << "; --set keys:";
    out << '\n';
    for (const SetKey& k : m.keys) {
      std::string choices;
      if (!k.choices.empty()) choices = fmt::format(" [{}]", fmt::join(k.choices, "|"));
      out << fmt::format("  {:<14}   {}={}{}  {}\n", "", k.name, attr_value_string(k.default_value),
                         choices, k.doc);
    }
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
