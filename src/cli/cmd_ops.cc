// trainfit ops: the op registry, with what each op keeps for backward.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

int run_ops(bool json, std::ostream& out) {
  if (json) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpSchema& s : op_registry().ops()) {
      nlohmann::json attrs = nlohmann::json::array();
      for (const AttrSpec& a : s.attrs) {
        attrs.push_back({{"name", a.name},
                         {"type", attr_kind_name(a.kind)},
                         {"default", a.default_value ? attr_value_string(*a.default_value) : ""},
                         {"doc", a.doc}});
      }
      ops.push_back({{"name", s.name},
                     {"family", s.family},
                     {"doc", s.doc},
                     {"composite", s.composite()},
                     {"attrs", attrs}});
    }
    out << nlohmann::json{{"ops", ops}}.dump(2) << '\n';
    return kExitOk;
  }
  std::string family;
  for (const OpSchema& s : op_registry().ops()) {
    if (s.family != family) {
      family = s.family;
      out << '\n' << family << '\n';
    }
    out << fmt::format("  {:<30} {}\n", s.name, s.doc);
  }
  return kExitOk;
}

}  // namespace

CommandRun setup_ops(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "print one JSON object");
  return [json](std::ostream& out, std::ostream&) { return run_ops(*json, out); };
}

}  // namespace trainfit
