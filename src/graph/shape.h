// Shapes, strides and the layout rules PyTorch uses to decide whether an op copies.
//
//   Dims s = {8, 197, 768};
//   Dims st = contiguous_strides(s);                       // {151296, 768, 1}
//   auto v = view_strides(s, st, {8 * 197, 768});          // a view: no copy
//   shape_string(s) == "8x197x768"
//
// Strides matter for memory: reshape() of a tensor that cannot be viewed copies it, and
// contiguous() of a transposed tensor allocates. Those copies are often what autograd keeps.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace trainfit {

using Dims = std::vector<int64_t>;

// "8x3x224x224"; a scalar prints as "scalar".
std::string shape_string(std::span<const int64_t> dims);

Dims contiguous_strides(std::span<const int64_t> shape);

// PyTorch's is_contiguous(): dims of size 1 are ignored; an empty tensor is contiguous.
bool is_contiguous(std::span<const int64_t> shape, std::span<const int64_t> strides);

// PyTorch's is_non_overlapping_and_dense(): a permutation of a contiguous tensor.
bool is_non_overlapping_and_dense(std::span<const int64_t> shape, std::span<const int64_t> strides);

// Strides of `new_shape` as a view of a tensor with `old_shape`/`old_strides`, or nullopt when
// no view exists and reshape() would copy (PyTorch's computeStride, TensorUtils.cpp).
std::optional<Dims> view_strides(std::span<const int64_t> old_shape,
                                 std::span<const int64_t> old_strides,
                                 std::span<const int64_t> new_shape);

// Broadcast two shapes as torch.broadcast_shapes does.
Result<Dims> broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b);

// Wraps a possibly negative dim into [0, rank).
Result<int64_t> wrap_dim(int64_t dim, int64_t rank);

// Resolves one -1 in a view/reshape target against numel.
Result<Dims> infer_size(std::span<const int64_t> requested, int64_t numel);

struct Layout {
  Dims shape;
  Dims strides;
};

// Strides TensorIterator gives a freshly allocated elementwise output of `shape` whose inputs
// have the given layouts (broadcast to `shape`): dense, in the dim order of the inputs' strides
// (TensorIteratorBase::reorder_dimensions). Contiguous inputs give a contiguous output.
Dims elementwise_output_strides(std::span<const int64_t> shape, std::span<const Layout> inputs);

// Strides of empty_like(input) with preserve_format: the input's strides when it is dense,
// otherwise dense strides in the input's dim order.
Dims empty_like_strides(std::span<const int64_t> shape, std::span<const int64_t> strides);

}  // namespace trainfit
