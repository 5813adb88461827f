// A model's parameters and kept-for-backward bytes per block (graph.h module_blocks): what
// `trainfit compare` puts side by side.
//
//   BlockFigures f = block_figures(graph);
//   for (const BlockRow& b : f.blocks) { ... b.block, b.parameters, b.kept_bytes ... }
//   f.attention_bytes  // kept storages that hold attention scores, probabilities or masks
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace trainfit {

struct BlockRow {
  std::string block;  // module path ("model.encoder"), or the model's name for the block root
  int64_t parameters = 0;
  int64_t kept_bytes = 0;
};

struct BlockFigures {
  std::string root;              // the block root's row name ("model" for ACT)
  std::vector<BlockRow> blocks;  // in model order
  int64_t parameters = 0;
  int64_t kept_bytes = 0;
  int64_t attention_bytes = 0;
  bool attention_known = true;  // false for a trace, which does not tell attention matrices apart
};

// What counts toward a block: a module's parameters or bytes kept for backward (negative to
// take bytes away, as in a difference of two batches).
struct BlockItem {
  ModuleId module = kNone;  // kNone: the model's own block
  int64_t parameters = 0;
  int64_t kept_bytes = 0;
  bool attention = false;  // kept_bytes hold attention scores, probabilities or masks
};

// Groups items by the blocks of `tree`'s modules; only the tree's modules are read. Blocks with
// neither parameters nor kept bytes stay out.
BlockFigures block_figures(const Graph& tree, const std::vector<BlockItem>& items);
// A zoo graph's parameters and kept_for_backward storages.
BlockFigures block_figures(const Graph& graph);

}  // namespace trainfit
