#include "base/size_math.h"

#include <gtest/gtest.h>

#include <limits>

namespace trainfit {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(SizeMath, AddAndMultiplyDetectOverflow) {
  EXPECT_EQ(checked_add(2, 3), 5);
  EXPECT_EQ(checked_add(kMax, 1), std::nullopt);
  EXPECT_EQ(checked_mul(1 << 20, 1 << 20), int64_t{1} << 40);
  EXPECT_EQ(checked_mul(kMax / 2 + 1, 2), std::nullopt);
}

TEST(SizeMath, NumelOfShapes) {
  const int64_t image[] = {256, 3, 224, 224};
  EXPECT_EQ(checked_numel(image), 256 * 3 * 224 * 224);
  EXPECT_EQ(checked_numel(std::span<const int64_t>{}), 1);  // a scalar
  const int64_t empty[] = {4, 0, 7};
  EXPECT_EQ(checked_numel(empty), 0);
  const int64_t negative[] = {4, -1};
  EXPECT_EQ(checked_numel(negative), std::nullopt);
  const int64_t huge[] = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_EQ(checked_numel(huge), std::nullopt);
}

TEST(SizeMath, CeilDiv) {
  EXPECT_EQ(ceil_div(10, 5), 2);
  EXPECT_EQ(ceil_div(11, 5), 3);
  EXPECT_EQ(ceil_div(0, 5), 0);
}

}  // namespace
}  // namespace trainfit
