// Allocation sequences with allocated/reserved figures worked out by hand from the rules of
// c10/cuda/CUDACachingAllocator.cpp (see allocator.h, Note [Policies]).
#include "alloc/allocator.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

void expect(const CachingAllocator& a, int64_t allocated, int64_t reserved) {
  EXPECT_EQ(a.stats().allocated_bytes, allocated);
  EXPECT_EQ(a.stats().reserved_bytes, reserved);
}

TEST(Allocator, RoundsTo512) {
  CachingAllocator a({});
  EXPECT_EQ(a.round_size(1), 512);
  EXPECT_EQ(a.round_size(512), 512);
  EXPECT_EQ(a.round_size(513), 1024);
  EXPECT_EQ(a.round_size(kMiB + 1), kMiB + 512);
}

TEST(Allocator, PowerOfTwoDivisions) {
  AllocatorConfig c;
  c.roundup_power2_divisions.fill(4);
  CachingAllocator a(c);
  EXPECT_EQ(a.round_size(1200), 1536);  // not above 512 * 4: plain rounding
  EXPECT_EQ(a.round_size(3 * kMiB + 1), 3 * kMiB + 512 * kKiB);  // steps of 2 MiB / 4
  EXPECT_EQ(a.round_size(4 * kMiB), 4 * kMiB);                   // a power of two stays
}

TEST(Allocator, SegmentSizes) {
  EXPECT_EQ(CachingAllocator::get_allocation_size(512), kSmallBuffer);
  EXPECT_EQ(CachingAllocator::get_allocation_size(kMiB), kSmallBuffer);
  EXPECT_EQ(CachingAllocator::get_allocation_size(kMiB + 512), kLargeBuffer);
  EXPECT_EQ(CachingAllocator::get_allocation_size(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(CachingAllocator::get_allocation_size(15 * kMiB + kKiB), 16 * kMiB);
}

TEST(Allocator, SmallRequestsShareOneTwoMiBSegment) {
  CachingAllocator a({});
  a.malloc(1);
  expect(a, 512, 2 * kMiB);
  a.malloc(1000);
  expect(a, 512 + 1024, 2 * kMiB);
}

TEST(Allocator, LargeRequestBelow10MiBGetsA20MiBSegmentAndSplits) {
  CachingAllocator a({});
  a.malloc(kMiB + 1);
  expect(a, kMiB + 512, 20 * kMiB);
  CachingAllocator b({});
  b.malloc(9 * kMiB + 512 * kKiB);
  expect(b, 9 * kMiB + 512 * kKiB, 20 * kMiB);
  b.malloc(4 * kMiB);  // best fit: the 10.5 MiB remainder
  expect(b, 13 * kMiB + 512 * kKiB, 20 * kMiB);
}

TEST(Allocator, UnsplitRemainderCountsAsAllocated) {
  CachingAllocator a({});
  a.malloc(15 * kMiB + kKiB);  // 16 MiB segment, 1023 KiB left: not split
  expect(a, 16 * kMiB, 16 * kMiB);
  CachingAllocator b({});
  b.malloc(100 * kMiB + 1);  // 102 MiB segment, ~2 MiB left: split
  expect(b, 100 * kMiB + 512, 102 * kMiB);
  CachingAllocator c({});
  c.malloc(10 * kMiB);
  expect(c, 10 * kMiB, 10 * kMiB);
}

TEST(Allocator, FreedBlocksStayCachedAndMerge) {
  CachingAllocator a({});
  const auto x = a.malloc(4 * kMiB);
  const auto y = a.malloc(4 * kMiB);
  expect(a, 8 * kMiB, 20 * kMiB);
  a.free(*x);
  a.free(*y);
  expect(a, 0, 20 * kMiB);  // nothing goes back to CUDA
  a.malloc(18 * kMiB);      // the merged 20 MiB block fits: no new segment
  expect(a, 18 * kMiB, 20 * kMiB);
}

TEST(Allocator, BestFitTakesTheSmallestBlockThatFits) {
  CachingAllocator a({});
  // One 20 MiB segment cut into 6 | 2 (kept) | 4 | 2 (kept) | 6 free tail.
  const auto six = a.malloc(6 * kMiB);
  a.malloc(2 * kMiB);
  const auto four = a.malloc(4 * kMiB);
  a.malloc(2 * kMiB);
  a.free(*six);
  a.free(*four);
  expect(a, 4 * kMiB, 20 * kMiB);
  // 3 MiB comes out of the 4 MiB hole, not a 6 MiB one. The 1 MiB left is not more than 1 MiB,
  // so the block is not split and counts whole.
  a.malloc(3 * kMiB);
  expect(a, 8 * kMiB, 20 * kMiB);
  // Both 6 MiB blocks still fit 6 MiB; the tie goes to the lower address.
  a.malloc(6 * kMiB);
  expect(a, 14 * kMiB, 20 * kMiB);
}

TEST(Allocator, FragmentationGrowsReserved) {
  CachingAllocator a({});
  const auto first = a.malloc(8 * kMiB);
  a.malloc(8 * kMiB);
  a.free(*first);       // free: 8 MiB hole and a 4 MiB tail
  a.malloc(10 * kMiB);  // fits neither: a new 10 MiB segment
  expect(a, 18 * kMiB, 30 * kMiB);
}

TEST(Allocator, ReleasesCachedSegmentsAndRetriesBeforeOom) {
  AllocatorConfig c;
  c.capacity = 40 * kMiB;
  CachingAllocator a(c);
  const auto x = a.malloc(24 * kMiB);
  a.free(*x);
  expect(a, 0, 24 * kMiB);
  ASSERT_TRUE(a.malloc(26 * kMiB));  // 24 + 26 > 40: release the cache, retry
  expect(a, 26 * kMiB, 26 * kMiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().num_ooms, 0);
}

TEST(Allocator, OutOfMemoryIsAResult) {
  AllocatorConfig c;
  c.capacity = 40 * kMiB;
  CachingAllocator a(c);
  a.malloc(30 * kMiB);
  EXPECT_FALSE(a.malloc(12 * kMiB));
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.last_oom().requested, 12 * kMiB);
  EXPECT_EQ(a.last_oom().reserved, 30 * kMiB);
  EXPECT_EQ(a.last_oom().capacity, 40 * kMiB);
  expect(a, 30 * kMiB, 30 * kMiB);
}

TEST(Allocator, MaxSplitSizeKeepsOversizeBlocksForOversizeRequests) {
  AllocatorConfig c;
  c.max_split_size = 32 * kMiB;
  CachingAllocator a(c);
  const auto big = a.malloc(40 * kMiB);
  a.free(*big);
  a.malloc(10 * kMiB);  // must not take the cached 40 MiB block
  expect(a, 10 * kMiB, 50 * kMiB);
  a.malloc(36 * kMiB);  // oversize: takes the 40 MiB block whole (within 20 MiB of slack)
  expect(a, 50 * kMiB, 50 * kMiB);
}

AllocatorConfig split_at_32_mib(int64_t capacity) {
  AllocatorConfig c;
  c.capacity = capacity;
  c.max_split_size = 32 * kMiB;
  return c;
}

// release_available_cached_blocks, before the full release: with max_split_size set, the
// smallest cached oversize block that covers the request goes back and the others stay.
TEST(Allocator, MaxSplitSizeFreesOneCachedOversizeBlockBeforeRetrying) {
  CachingAllocator a(split_at_32_mib(120 * kMiB));
  const auto x = a.malloc(40 * kMiB);
  const auto y = a.malloc(50 * kMiB);
  a.malloc(4 * kMiB);  // a 20 MiB segment, split: 16 MiB of it stays free
  a.free(*x);
  a.free(*y);
  expect(a, 4 * kMiB, 110 * kMiB);
  // 30 MiB may not take an oversize block; 110 + 30 > 120: the 40 MiB one goes back.
  ASSERT_TRUE(a.malloc(30 * kMiB));
  expect(a, 34 * kMiB, 100 * kMiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 0);
}

TEST(Allocator, MaxSplitSizeFreesTheLargestOversizeBlocksUntilTheyCoverTheRequest) {
  CachingAllocator a(split_at_32_mib(130 * kMiB));
  const auto x = a.malloc(34 * kMiB);
  const auto y = a.malloc(36 * kMiB);
  const auto z = a.malloc(38 * kMiB);
  a.free(*x);
  a.free(*y);
  a.free(*z);
  // No cached block holds 60 MiB: 38 and then 36 go back (74 >= 60), 34 stays.
  ASSERT_TRUE(a.malloc(60 * kMiB));
  expect(a, 60 * kMiB, 94 * kMiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 0);
}

TEST(Allocator, ExpandableSegmentsMapPagesOnDemand) {
  AllocatorConfig c;
  c.expandable_segments = true;
  CachingAllocator a(c);
  a.malloc(30 * kMiB);  // two 20 MiB pages; split even with 10 MiB left
  expect(a, 30 * kMiB, 40 * kMiB);
  a.malloc(5 * kMiB);  // from the mapped free tail
  expect(a, 35 * kMiB, 40 * kMiB);
  a.malloc(12 * kMiB);  // 5 MiB free at the end: map one more page
  expect(a, 47 * kMiB, 60 * kMiB);
}

TEST(Allocator, EmptyCacheReturnsWholeFreeSegmentsOnly) {
  CachingAllocator a({});
  const auto x = a.malloc(12 * kMiB);  // its own segment
  a.malloc(4 * kMiB);                  // a 20 MiB segment, split
  const auto z = a.malloc(4 * kMiB);   // same segment
  a.free(*x);
  a.free(*z);
  a.empty_cache();
  expect(a, 4 * kMiB, 20 * kMiB);  // the 12 MiB segment went back; the split one stays
  EXPECT_EQ(a.stats().peak_reserved_bytes, 32 * kMiB);
}

TEST(Allocator, ZeroByteRequestsTouchNothing) {
  CachingAllocator a({});
  const auto z = a.malloc(0);
  ASSERT_TRUE(z);
  expect(a, 0, 0);
  a.free(*z);
  expect(a, 0, 0);
}

}  // namespace
}  // namespace trainfit
