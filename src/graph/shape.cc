#include "graph/shape.h"

#include <algorithm>
#include <numeric>

#include "base/size_math.h"

namespace trainfit {

std::string shape_string(std::span<const int64_t> dims) {
  if (dims.empty()) return "scalar";
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += 'x';
    out += std::to_string(dims[i]);
  }
  return out;
}

Dims contiguous_strides(std::span<const int64_t> shape) {
  Dims strides(shape.size());
  int64_t running = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    running *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

bool is_contiguous(std::span<const int64_t> shape, std::span<const int64_t> strides) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

bool is_non_overlapping_and_dense(std::span<const int64_t> shape,
                                  std::span<const int64_t> strides) {
  const size_t rank = shape.size();
  if (rank == 1) return shape[0] < 2 || strides[0] == 1;
  std::vector<size_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  // Sort dims by stride, size-1 dims last, as c10::TensorImpl does.
  std::stable_sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (shape[a] < 2) return false;
    if (shape[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t expected = 1;
  for (size_t d : perm) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::optional<Dims> view_strides(std::span<const int64_t> old_shape,
                                 std::span<const int64_t> old_strides,
                                 std::span<const int64_t> new_shape) {
  if (old_shape.empty()) return Dims(new_shape.size(), 1);
  const int64_t numel = checked_numel(old_shape).value_or(0);
  if (numel == 0) {
    if (std::equal(old_shape.begin(), old_shape.end(), new_shape.begin(), new_shape.end())) {
      return Dims(old_strides.begin(), old_strides.end());
    }
    return contiguous_strides(new_shape);
  }
  // Walk the old dims from the innermost outwards in "chunks" of dims that are contiguous with
  // each other; each chunk must be covered exactly by a run of new dims.
  Dims new_strides(new_shape.size());
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    const bool chunk_ends =
        tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Result<Dims> broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return invalid_argument("shapes " + shape_string(a) + " and " + shape_string(b) +
                              " cannot be broadcast together (dim " + std::to_string(i) + ": " +
                              std::to_string(da) + " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Result<int64_t> wrap_dim(int64_t dim, int64_t rank) {
  const int64_t lo = rank == 0 ? -1 : -rank;
  const int64_t hi = rank == 0 ? 0 : rank - 1;
  if (dim < lo || dim > hi) {
    return invalid_argument("dim " + std::to_string(dim) + " is out of range for a tensor of " +
                            std::to_string(rank) + " dims");
  }
  return dim < 0 ? dim + std::max<int64_t>(rank, 1) : dim;
}

Result<Dims> infer_size(std::span<const int64_t> requested, int64_t numel) {
  Dims out(requested.begin(), requested.end());
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer_at >= 0) return invalid_argument("only one dimension can be -1 in a reshape");
      infer_at = static_cast<int>(i);
    } else if (out[i] < 0) {
      return invalid_argument("invalid size " + std::to_string(out[i]) + " in a reshape");
    } else {
      auto next = checked_mul(known, out[i]);
      if (!next) return out_of_range("reshape target " + shape_string(requested) + " overflows");
      known = *next;
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) {
      return invalid_argument("cannot reshape " + std::to_string(numel) + " elements into " +
                              shape_string(requested));
    }
    out[infer_at] = numel / known;
  } else if (known != numel) {
    return invalid_argument("cannot reshape " + std::to_string(numel) + " elements into " +
                            shape_string(requested));
  }
  return out;
}

namespace {

// Dense strides for `shape` with dims laid out innermost-first in the order `perm`.
Dims dense_strides_in_order(std::span<const int64_t> shape, std::span<const size_t> perm) {
  Dims strides(shape.size());
  int64_t running = 1;
  for (size_t d : perm) {
    strides[d] = running;
    running *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

}  // namespace

Dims elementwise_output_strides(std::span<const int64_t> shape, std::span<const Layout> inputs) {
  const size_t rank = shape.size();
  if (rank == 0) return {};
  // Each input's strides, aligned to the output rank; broadcast dims get stride 0.
  std::vector<Dims> aligned;
  aligned.reserve(inputs.size());
  for (const Layout& in : inputs) {
    Dims s(rank, 0);
    const size_t offset = rank - in.shape.size();
    for (size_t i = 0; i < in.shape.size(); ++i) {
      s[offset + i] = (in.shape[i] == 1 && shape[offset + i] != 1) ? 0 : in.strides[i];
    }
    aligned.push_back(std::move(s));
  }
  // perm lists dims from the innermost outwards; start from the contiguous order.
  std::vector<size_t> perm(rank);
  for (size_t i = 0; i < rank; ++i) perm[i] = rank - 1 - i;
  // +1: dim0 should come after dim1; -1: before; 0: ambiguous.
  auto should_swap = [&](size_t dim0, size_t dim1) {
    for (const Dims& s : aligned) {
      const int64_t stride0 = s[dim0];
      const int64_t stride1 = s[dim1];
      if (stride0 == 0 || stride1 == 0) continue;
      if (stride0 < stride1) return -1;
      if (stride0 > stride1) return 1;
      if (shape[dim0] > shape[dim1]) return 1;
    }
    return 0;
  };
  for (size_t i = 1; i < rank; ++i) {
    size_t dim1 = i;
    for (size_t dim0 = i; dim0-- > 0;) {
      const int cmp = should_swap(perm[dim0], perm[dim1]);
      if (cmp > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (cmp < 0) {
        break;
      }
    }
  }
  return dense_strides_in_order(shape, perm);
}

Dims empty_like_strides(std::span<const int64_t> shape, std::span<const int64_t> strides) {
  if (is_non_overlapping_and_dense(shape, strides)) return Dims(strides.begin(), strides.end());
  Layout self{Dims(shape.begin(), shape.end()), Dims(strides.begin(), strides.end())};
  return elementwise_output_strides(shape, std::span<const Layout>(&self, 1));
}

}  // namespace trainfit
