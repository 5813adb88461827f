// The op registry: every op trainfit knows, one OpSchema each, from an explicit list of
// families (op_registry.cc). A test checks every entry is complete and has a test case.
//
//   const OpSchema* conv = op_registry().find("conv2d");
//   for (const OpSchema& s : op_registry().ops()) { ... }
#pragma once

#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/op_schema.h"

namespace trainfit {

class OpRegistry {
 public:
  explicit OpRegistry(std::vector<OpSchema> ops);
  const OpSchema* find(std::string_view name) const;
  const std::vector<OpSchema>& ops() const { return ops_; }

 private:
  std::vector<OpSchema> ops_;
  std::unordered_map<std::string_view, size_t> index_;  // name -> position in ops_
};

// The immutable registry of all op families, built on first use.
const OpRegistry& op_registry();

// One function per family, each in its own ops_<family>.cc.
void add_conv_ops(std::vector<OpSchema>& ops);
void add_linear_ops(std::vector<OpSchema>& ops);
void add_norm_ops(std::vector<OpSchema>& ops);
void add_activation_ops(std::vector<OpSchema>& ops);
void add_pool_ops(std::vector<OpSchema>& ops);
void add_elementwise_ops(std::vector<OpSchema>& ops);
void add_shape_ops(std::vector<OpSchema>& ops);
void add_reduction_ops(std::vector<OpSchema>& ops);
void add_attention_ops(std::vector<OpSchema>& ops);
void add_loss_ops(std::vector<OpSchema>& ops);
void add_embedding_ops(std::vector<OpSchema>& ops);
void add_index_ops(std::vector<OpSchema>& ops);

}  // namespace trainfit
