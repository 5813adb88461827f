#include "graph/op_registry.h"

#include "base/check.h"

namespace trainfit {

OpRegistry::OpRegistry(std::vector<OpSchema> ops) : ops_(std::move(ops)) {
  for (size_t i = 0; i < ops_.size(); ++i) {
    const bool added = index_.emplace(ops_[i].name, i).second;
    TF_CHECK(added) << "op registered twice: " << ops_[i].name;
  }
}

const OpSchema* OpRegistry::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &ops_[it->second];
}

const OpRegistry& op_registry() {
  static const OpRegistry kRegistry = [] {
    std::vector<OpSchema> ops;
    add_conv_ops(ops);
    add_linear_ops(ops);
    add_norm_ops(ops);
    add_activation_ops(ops);
    add_pool_ops(ops);
    add_elementwise_ops(ops);
    add_shape_ops(ops);
    add_reduction_ops(ops);
    add_attention_ops(ops);
    add_loss_ops(ops);
    add_embedding_ops(ops);
    add_index_ops(ops);
    return OpRegistry(std::move(ops));
  }();
  return kRegistry;
}

}  // namespace trainfit
