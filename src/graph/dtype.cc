#include "graph/dtype.h"

#include <array>

#include "base/check.h"

namespace trainfit {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::string_view short_name;
  int64_t bytes;
  bool floating;
  int rank;  // promotion order among floating types, or among integer types
};

constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {DType::kFloat32, "float32", "fp32", 4, true, 3},
    {DType::kFloat16, "float16", "fp16", 2, true, 2},
    {DType::kBFloat16, "bfloat16", "bf16", 2, true, 2},
    {DType::kFloat8E4M3, "float8_e4m3fn", "fp8-e4m3", 1, true, 1},
    {DType::kFloat8E5M2, "float8_e5m2", "fp8-e5m2", 1, true, 1},
    {DType::kFloat64, "float64", "fp64", 8, true, 4},
    {DType::kInt64, "int64", "i64", 8, false, 4},
    {DType::kInt32, "int32", "i32", 4, false, 3},
    {DType::kUInt8, "uint8", "u8", 1, false, 1},
    {DType::kBool, "bool", "bool", 1, false, 0},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& i : kDTypes) {
    if (i.dtype == dtype) return i;
  }
  TF_CHECK(false) << "unknown dtype " << static_cast<int>(dtype);
}

}  // namespace

int64_t dtype_bytes(DType dtype) {
  return info(dtype).bytes;
}
std::string_view dtype_name(DType dtype) {
  return info(dtype).name;
}
bool is_floating(DType dtype) {
  return info(dtype).floating;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& i : kDTypes) {
    if (name == i.name || name == i.short_name) return i.dtype;
  }
  if (name == "float") return DType::kFloat32;
  if (name == "half") return DType::kFloat16;
  if (name == "long") return DType::kInt64;
  return std::nullopt;
}

DType accumulate_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return DType::kFloat32;
    default:
      return dtype;
  }
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const DTypeInfo& ia = info(a);
  const DTypeInfo& ib = info(b);
  if (ia.floating != ib.floating) return ia.floating ? a : b;
  // float16 with bfloat16 promotes to float32, as in PyTorch.
  if (ia.rank == ib.rank) return ia.floating ? DType::kFloat32 : a;
  return ia.rank > ib.rank ? a : b;
}

}  // namespace trainfit
