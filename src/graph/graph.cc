#include "graph/graph.h"

#include <map>
#include <set>

namespace trainfit {

int64_t Graph::batch_size() const {
  if (inputs.empty() || value(inputs.front()).shape.empty()) return 1;
  return value(inputs.front()).shape.front();
}

std::vector<ModuleId> module_blocks(const Graph& g) {
  std::vector<ModuleId> block(g.modules.size(), kNone);
  if (g.modules.empty()) return block;
  // A module entered twice is one module: everything below goes by the first entry of a path.
  std::map<std::string_view, ModuleId> first;
  std::vector<ModuleId> canonical(g.modules.size());
  for (size_t i = 0; i < g.modules.size(); ++i) {
    canonical[i] = first.emplace(g.modules[i].path, static_cast<ModuleId>(i)).first->second;
  }
  std::vector<std::set<ModuleId>> children(g.modules.size());
  for (size_t i = 0; i < g.modules.size(); ++i) {
    const ModuleId parent = g.modules[i].parent;
    if (parent != kNone) {
      children[static_cast<size_t>(canonical[static_cast<size_t>(parent)])].insert(canonical[i]);
    }
  }
  std::vector<bool> above_root(g.modules.size(), false);
  ModuleId root = 0;
  above_root[0] = true;
  while (children[static_cast<size_t>(root)].size() == 1) {
    root = *children[static_cast<size_t>(root)].begin();
    above_root[static_cast<size_t>(root)] = true;
  }
  // Modules are created parent first, so one pass settles each from its parent.
  for (size_t i = 0; i < g.modules.size(); ++i) {
    const auto c = static_cast<size_t>(canonical[i]);
    const ModuleId parent = g.modules[i].parent;
    if (above_root[c]) {
      block[i] = root;
    } else if (parent == kNone || canonical[static_cast<size_t>(parent)] == root) {
      block[i] = static_cast<ModuleId>(c);
    } else {
      block[i] = block[static_cast<size_t>(parent)];
    }
  }
  return block;
}

bool module_matches(std::string_view path, std::string_view pattern) {
  while (true) {
    const size_t p_end = pattern.find('.');
    const size_t s_end = path.find('.');
    const std::string_view p = pattern.substr(0, p_end);
    const std::string_view s = path.substr(0, s_end);
    if (p != "*" && p != s) return false;
    if (p_end == std::string_view::npos || s_end == std::string_view::npos) {
      return p_end == std::string_view::npos && s_end == std::string_view::npos;
    }
    pattern.remove_prefix(p_end + 1);
    path.remove_prefix(s_end + 1);
  }
}

bool is_batch_norm(const Module& module) {
  return module.type.starts_with("BatchNorm") || module.type == "SyncBatchNorm";
}

}  // namespace trainfit
