#include "graph/graph.h"

#include <map>
#include <set>

namespace trainfit {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kAmpFp16:
      return "amp-fp16";
    case Precision::kAmpBf16:
      return "amp-bf16";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

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

}  // namespace trainfit
