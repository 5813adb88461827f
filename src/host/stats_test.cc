#include "host/stats.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

TEST(Percentiles, NearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 200; ++i) v.push_back(i);
  const Percentiles p = percentiles(v);
  EXPECT_EQ(p.p50, 100);
  EXPECT_EQ(p.p99, 198);
  EXPECT_EQ(p.max, 200);
  const Percentiles one = percentiles({7});
  EXPECT_EQ(one.p50, 7);
  EXPECT_EQ(one.p99, 7);
  const Percentiles none = percentiles({});
  EXPECT_EQ(none.max, 0);
  const Percentiles unsorted = percentiles({5, 1, 3});
  EXPECT_EQ(unsorted.p50, 3);
  EXPECT_EQ(unsorted.max, 5);
}

TEST(Mean, OfValuesAndOfNone) {
  EXPECT_EQ(mean({2, 4, 9}), 5);
  EXPECT_EQ(mean({-1.5}), -1.5);
  EXPECT_EQ(mean({}), 0);
}

}  // namespace
}  // namespace trainfit
