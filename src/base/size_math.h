// Overflow-checked int64 arithmetic for sizes, element counts and bytes.
//
//   std::optional<int64_t> bytes = checked_mul(numel, dtype_bytes(dtype));
//   if (!bytes) return out_of_range("tensor of shape ... overflows int64 bytes");
//
// Every size that depends on user input (batch, image size, sequence length) goes through here.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace trainfit {

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// Product of all dims (1 for a scalar); nullopt on overflow or a negative dim.
inline std::optional<int64_t> checked_numel(std::span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    auto next = checked_mul(n, d);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

// Ceil division for non-negative a and positive b.
inline int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

}  // namespace trainfit
