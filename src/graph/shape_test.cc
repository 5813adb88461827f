#include "graph/shape.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

TEST(Shape, ContiguityIgnoresSizeOneDims) {
  EXPECT_EQ(contiguous_strides(Dims{2, 3, 4}), (Dims{12, 4, 1}));
  EXPECT_TRUE(is_contiguous(Dims{2, 3, 4}, Dims{12, 4, 1}));
  EXPECT_TRUE(is_contiguous(Dims{2, 1, 4}, Dims{4, 99, 1}));
  EXPECT_FALSE(is_contiguous(Dims{3, 2}, Dims{1, 3}));
  EXPECT_TRUE(is_non_overlapping_and_dense(Dims{3, 2}, Dims{1, 3}));
  EXPECT_FALSE(is_non_overlapping_and_dense(Dims{3, 2}, Dims{4, 1}));  // a slice with gaps
}

TEST(Shape, ViewStridesFollowPyTorch) {
  // Contiguous tensors can be viewed as any shape with the same numel.
  EXPECT_EQ(view_strides(Dims{2, 3, 4}, Dims{12, 4, 1}, Dims{6, 4}), (Dims{4, 1}));
  // A transposed (L, B, E) tensor cannot be folded to (L*B, E)...
  EXPECT_EQ(view_strides(Dims{3, 2, 5}, Dims{5, 15, 1}, Dims{6, 5}), std::nullopt);
  // ...but its last dims can be split, and (B, H*d) -> (B, H, d) works on a transposed layout.
  EXPECT_EQ(view_strides(Dims{3, 2, 6}, Dims{6, 18, 1}, Dims{3, 2, 2, 3}), (Dims{6, 18, 3, 1}));
  // A slice of the last dim keeps the leading dims mergeable.
  EXPECT_EQ(view_strides(Dims{2, 3, 5}, Dims{24, 8, 1}, Dims{6, 5}), (Dims{8, 1}));
  // An expanded dim (stride 0) cannot merge with a real one.
  EXPECT_EQ(view_strides(Dims{2, 3, 4}, Dims{0, 4, 1}, Dims{6, 4}), std::nullopt);
}

TEST(Shape, Broadcasting) {
  EXPECT_EQ(*broadcast_shapes(Dims{2, 4, 6, 6}, Dims{4, 1, 1}), (Dims{2, 4, 6, 6}));
  EXPECT_EQ(*broadcast_shapes(Dims{}, Dims{3}), (Dims{3}));
  const Result<Dims> bad = broadcast_shapes(Dims{2, 3}, Dims{4, 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("2 vs 4"), std::string::npos);
}

TEST(Shape, WrapDimAndInferSize) {
  EXPECT_EQ(*wrap_dim(-1, 4), 3);
  EXPECT_FALSE(wrap_dim(4, 4).ok());
  EXPECT_EQ(*infer_size(Dims{2, -1}, 12), (Dims{2, 6}));
  EXPECT_FALSE(infer_size(Dims{-1, -1}, 12).ok());
  EXPECT_FALSE(infer_size(Dims{5, -1}, 12).ok());
  EXPECT_FALSE(infer_size(Dims{3, 3}, 12).ok());
}

TEST(Shape, ElementwiseOutputsFollowTheInputsLayout) {
  const Layout contiguous{{2, 3, 4}, {12, 4, 1}};
  EXPECT_EQ(elementwise_output_strides(Dims{2, 3, 4}, std::span(&contiguous, 1)), (Dims{12, 4, 1}));
  // A channels-last input gives a channels-last output.
  const Layout nhwc{{2, 4, 6, 6}, {144, 1, 24, 4}};
  EXPECT_EQ(elementwise_output_strides(Dims{2, 4, 6, 6}, std::span(&nhwc, 1)),
            (Dims{144, 1, 24, 4}));
  // With mixed layouts the first operand's order wins.
  const Layout mixed[] = {{{3, 2, 4}, {4, 12, 1}}, {{3, 2, 4}, {8, 4, 1}}};
  EXPECT_EQ(elementwise_output_strides(Dims{3, 2, 4}, mixed), (Dims{4, 12, 1}));
  // A broadcast operand does not decide the order.
  const Layout bcast[] = {{{4, 1, 1}, {1, 1, 1}}, {{2, 4, 6, 6}, {144, 36, 6, 1}}};
  EXPECT_EQ(elementwise_output_strides(Dims{2, 4, 6, 6}, bcast), (Dims{144, 36, 6, 1}));
}

TEST(Shape, EmptyLikeKeepsDenseLayouts) {
  EXPECT_EQ(empty_like_strides(Dims{3, 2}, Dims{1, 3}), (Dims{1, 3}));
  EXPECT_EQ(empty_like_strides(Dims{3, 2}, Dims{4, 1}), (Dims{2, 1}));
}

TEST(Shape, Strings) {
  EXPECT_EQ(shape_string(Dims{8, 3, 224, 224}), "8x3x224x224");
  EXPECT_EQ(shape_string(Dims{}), "scalar");
}

}  // namespace
}  // namespace trainfit
