#include "graph/blocks.h"

#include "base/size_math.h"
#include "graph/activations.h"

namespace trainfit {

BlockFigures block_figures(const Graph& tree, const std::vector<BlockItem>& items) {
  BlockFigures f;
  if (tree.modules.empty()) return f;
  const std::vector<ModuleId> block_of = module_blocks(tree);
  // One row per distinct block, in the order the blocks were first entered; items outside any
  // module count with the model's own block.
  std::vector<int> row_of(tree.modules.size(), -1);
  auto row = [&](ModuleId module) -> BlockRow& {
    const auto b = static_cast<size_t>(block_of[module == kNone ? 0 : static_cast<size_t>(module)]);
    if (row_of[b] < 0) {
      row_of[b] = static_cast<int>(f.blocks.size());
      const Module& m = tree.modules[b];
      f.blocks.push_back({m.path.empty() ? m.name : m.path, 0, 0});
    }
    return f.blocks[static_cast<size_t>(row_of[b])];
  };
  for (size_t m = 0; m < tree.modules.size(); ++m) row(static_cast<ModuleId>(m));
  f.root = f.blocks.front().block;  // module 0's block is the block root
  for (const BlockItem& item : items) {
    BlockRow& r = row(item.module);
    r.parameters += item.parameters;
    r.kept_bytes += item.kept_bytes;
    f.parameters += item.parameters;
    f.kept_bytes += item.kept_bytes;
    if (item.attention) f.attention_bytes += item.kept_bytes;
  }
  // Blocks with neither (a parameter-free activation module) stay out of the report.
  std::erase_if(f.blocks, [](const BlockRow& r) { return r.parameters == 0 && r.kept_bytes == 0; });
  return f;
}

BlockFigures block_figures(const Graph& g) {
  std::vector<BlockItem> items;
  for (const Param& p : g.params) {
    if (p.buffer) continue;
    items.push_back({.module = p.module, .parameters = param_weights(g, p)});
  }
  std::vector<bool> attention(g.storages.size(), false);
  for (const Value& v : g.values) {
    if (v.role == ValueRole::kAttentionMatrix && v.storage != kNone) {
      attention[static_cast<size_t>(v.storage)] = true;
    }
  }
  for (const KeptStorage& k : kept_for_backward(g)) {
    items.push_back({.module = k.module,
                     .kept_bytes = k.bytes,
                     .attention = attention[static_cast<size_t>(k.storage)]});
  }
  return block_figures(g, items);
}

}  // namespace trainfit
