#include "graph/attrs.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

TEST(Attrs, SetGetAndListExpansion) {
  Attrs a{{"out_channels", int64_t{64}}, {"kernel_size", Dims{7}}, {"eps", 1e-5}};
  EXPECT_EQ(a.get_int("out_channels"), 64);
  EXPECT_EQ(a.get_ints("kernel_size", 2), (Dims{7, 7}));
  EXPECT_DOUBLE_EQ(a.get_float("eps"), 1e-5);
  a.set("out_channels", int64_t{32});
  EXPECT_EQ(a.get_int("out_channels"), 32);
  EXPECT_EQ(a.items().size(), 3U);
  EXPECT_FALSE(a.has("bias"));
  EXPECT_EQ(attr_value_string(AttrValue{Dims{1, 2}}), "[1,2]");
}

}  // namespace
}  // namespace trainfit
