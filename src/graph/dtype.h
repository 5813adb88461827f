// Tensor element types, named as PyTorch names them.
//
//   DType t = DType::kBFloat16;
//   dtype_bytes(t) == 2; dtype_name(t) == "bfloat16"; parse_dtype("bf16") == DType::kBFloat16
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace trainfit {

enum class DType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat8E4M3,  // torch.float8_e4m3fn
  kFloat8E5M2,  // torch.float8_e5m2
  kFloat64,     // the dtype of Python scalars that autograd saves as wrapped tensors
  kInt64,
  kInt32,
  kUInt8,
  kBool,
};

int64_t dtype_bytes(DType dtype);
std::string_view dtype_name(DType dtype);
bool is_floating(DType dtype);

// Accepts PyTorch names ("bfloat16", "float8_e4m3fn") and short forms ("bf16", "fp8-e4m3").
std::optional<DType> parse_dtype(std::string_view name);

// The dtype PyTorch computes reductions and norm statistics in on CUDA (at::acc_type).
DType accumulate_dtype(DType dtype);

// torch.promote_types for the floating and integer types trainfit models.
DType promote_types(DType a, DType b);

}  // namespace trainfit
