#include "estimate/collectives.h"

#include <gtest/gtest.h>

#include "estimate/gpu_catalog.h"

namespace trainfit {
namespace {

TEST(Collectives, RingCostsFollowNcclTestsBusBandwidth) {
  // all_reduce_perf: busbw = algbw x 2(n-1)/n, so 100 MB over 4 ranks at 24.5 GB/s takes
  // 100e6 / 24.5e9 x 1.5.
  EXPECT_NEAR(all_reduce_seconds(100e6, 4, 24.5), kCollectiveLatencyS + 1.5 * 100e6 / 24.5e9,
              1e-15);
  EXPECT_NEAR(all_gather_seconds(100e6, 4, 24.5), kCollectiveLatencyS + 0.75 * 100e6 / 24.5e9,
              1e-15);
  EXPECT_NEAR(broadcast_seconds(100e6, 24.5), kCollectiveLatencyS + 100e6 / 24.5e9, 1e-15);
  // One rank moves nothing; two move the buffer once each way of the ring's halves.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(100e6, 1, 24.5), kCollectiveLatencyS);
  EXPECT_NEAR(all_reduce_seconds(100e6, 2, 24.5), kCollectiveLatencyS + 100e6 / 24.5e9, 1e-15);
}

TEST(Collectives, EveryCatalogGpuHasALink) {
  for (const GpuSpec& g : gpu_catalog()) {
    SCOPED_TRACE(g.name);
    const Link l = link_of(default_link(g.name));
    EXPECT_GT(l.bus_gbps, 0);
    EXPECT_FALSE(l.display.empty());
    EXPECT_FALSE(l.source.empty());
  }
  EXPECT_EQ(default_link("rtx4090"), LinkKind::kPcie4);
  EXPECT_EQ(default_link("a100-80gb"), LinkKind::kNvlink3);
  EXPECT_EQ(default_link("h100-80gb"), LinkKind::kNvlink4);
  // Faster generations carry more.
  EXPECT_LT(link_of(LinkKind::kPcie3).bus_gbps, link_of(LinkKind::kPcie4).bus_gbps);
  EXPECT_LT(link_of(LinkKind::kPcie4).bus_gbps, link_of(LinkKind::kPcie5).bus_gbps);
  EXPECT_LT(link_of(LinkKind::kNvlink2).bus_gbps, link_of(LinkKind::kNvlink3).bus_gbps);
  EXPECT_LT(link_of(LinkKind::kNvlink3).bus_gbps, link_of(LinkKind::kNvlink4).bus_gbps);
}

// Three buckets of 10 MB on 2 ranks at 10 GB/s: each all-reduce takes 1 ms plus the latency.
TEST(Collectives, BucketsOverlapBackwardOneAfterAnother) {
  const Link link{LinkKind::kPcie4, "test", 10.0, true, "test"};
  const double each = all_reduce_seconds(10e6, 2, 10.0);
  std::vector<GradientBucket> buckets = {
      {{0}, 10'000'000}, {{1}, 10'000'000}, {{2, 3}, 10'000'000}};
  // Ready at 1, 1.5 and 10 ms of a 10 ms backward: the second waits for the first; the third
  // starts when backward ends and is all exposed.
  const std::vector<double> ready = {1e-3, 1.5e-3, 4e-3, 10e-3};
  const CommTime c = ddp_comm_time(buckets, ready, 10e-3, 2, link);
  ASSERT_EQ(c.buckets.size(), 3U);
  EXPECT_DOUBLE_EQ(c.buckets[0].start_s, 1e-3);
  EXPECT_DOUBLE_EQ(c.buckets[1].start_s, 1e-3 + each);  // after the first, not at 1.5 ms
  EXPECT_DOUBLE_EQ(c.buckets[2].ready_s, 10e-3);        // its last tensor
  EXPECT_DOUBLE_EQ(c.buckets[2].start_s, 10e-3);
  EXPECT_NEAR(c.exposed_s, each, 1e-15);
  EXPECT_NEAR(c.all_reduce_s, 3 * each, 1e-15);
  // A link ten times slower: the all-reduces queue past the end of backward.
  const Link slow{LinkKind::kPcie3, "slow", 1.0, true, "test"};
  const double slow_each = all_reduce_seconds(10e6, 2, 1.0);
  const CommTime d = ddp_comm_time(buckets, ready, 10e-3, 2, slow);
  EXPECT_NEAR(d.exposed_s, 1e-3 + 3 * slow_each - 10e-3, 1e-12);
}

}  // namespace
}  // namespace trainfit
