#include "graph/dtype.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_bytes(DType::kFloat32), 4);
  EXPECT_EQ(dtype_bytes(DType::kBFloat16), 2);
  EXPECT_EQ(dtype_bytes(DType::kFloat8E4M3), 1);
  EXPECT_EQ(dtype_bytes(DType::kInt64), 8);
  EXPECT_EQ(dtype_bytes(DType::kBool), 1);
  EXPECT_EQ(dtype_name(DType::kFloat8E5M2), "float8_e5m2");
  EXPECT_TRUE(is_floating(DType::kFloat16));
  EXPECT_FALSE(is_floating(DType::kUInt8));
}

TEST(DType, ParsesPyTorchAndShortNames) {
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBFloat16);
  EXPECT_EQ(parse_dtype("bf16"), DType::kBFloat16);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kFloat8E4M3);
  EXPECT_EQ(parse_dtype("half"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("complex64"), std::nullopt);
  EXPECT_EQ(parse_dtype(""), std::nullopt);
}

TEST(DType, PromotesLikeTorch) {
  EXPECT_EQ(promote_types(DType::kFloat16, DType::kFloat32), DType::kFloat32);
  EXPECT_EQ(promote_types(DType::kFloat16, DType::kBFloat16), DType::kFloat32);
  EXPECT_EQ(promote_types(DType::kInt64, DType::kFloat16), DType::kFloat16);
  EXPECT_EQ(promote_types(DType::kInt32, DType::kInt64), DType::kInt64);
  EXPECT_EQ(promote_types(DType::kBool, DType::kUInt8), DType::kUInt8);
  EXPECT_EQ(accumulate_dtype(DType::kBFloat16), DType::kFloat32);
  EXPECT_EQ(accumulate_dtype(DType::kFloat32), DType::kFloat32);
}

}  // namespace
}  // namespace trainfit
