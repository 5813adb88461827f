// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, native
// backend, PyTorch 2.x), one device and one stream. Names follow the source so the two can be
// read side by side.
//
//   CachingAllocator a(AllocatorConfig{});
//   auto b = a.malloc(15 * kMiB + 1024);   // rounded, a 16 MiB segment, not split
//   a.free(*b);                            // cached, not returned: reserved stays
//   a.stats().allocated_bytes, a.stats().peak_reserved_bytes ...
//
// Note [Policies]
//  - Sizes round up to 512 B (round_size), optionally to power-of-two divisions.
//  - Rounded sizes up to 1 MiB use the small pool (2 MiB segments); larger ones the large pool
//    (20 MiB segments below 10 MiB, else the size rounded up to 2 MiB).
//  - A request takes the smallest cached block that fits (best fit by size, then address).
//  - A block is split when the remainder is at least 512 B (small pool) or more than 1 MiB
//    (large pool); an unsplit block counts whole in allocated_bytes.
//  - Freed blocks merge with free neighbours of their segment and stay cached; segments go back
//    to CUDA only when an allocation fails, or on empty_cache(). A failed allocation first frees
//    cached oversize blocks, enough to cover it (release_available_cached_blocks: only with
//    max_split_size set), and tries again; then frees every cached unsplit segment
//    (release_cached_blocks) and tries once more, which num_alloc_retries counts.
//  - expandable_segments maps 2 MiB (small) / 20 MiB (large) pages into one growing segment per
//    pool instead of allocating segments.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/id_vector.h"

namespace trainfit {

inline constexpr int64_t kKiB = 1024;
inline constexpr int64_t kMiB = int64_t{1024} * 1024;
inline constexpr int64_t kMinBlockSize = 512;       // all sizes are multiples of this
inline constexpr int64_t kSmallSize = 1 * kMiB;     // largest small-pool request
inline constexpr int64_t kSmallBuffer = 2 * kMiB;   // small-pool segment size
inline constexpr int64_t kLargeBuffer = 20 * kMiB;  // segment for large requests < 10 MiB
inline constexpr int64_t kMinLargeAlloc = 10 * kMiB;
inline constexpr int64_t kRoundLarge = 2 * kMiB;  // larger segments round up to this
inline constexpr int kRoundUpPowerOfTwoIntervals = 16;

struct AllocatorConfig {
  int64_t max_split_size = -1;                    // -1: unlimited (the default)
  int64_t max_non_split_rounding = kLargeBuffer;  // slack allowed for an oversize request
  std::array<int, kRoundUpPowerOfTwoIntervals> roundup_power2_divisions{};  // 0: off
  bool expandable_segments = false;
  int64_t capacity = -1;  // bytes the allocator may reserve; -1: unlimited
};

struct AllocatorStats {
  int64_t allocated_bytes = 0;  // block sizes handed out (what memory_allocated() reads)
  int64_t reserved_bytes = 0;   // segments obtained from CUDA (memory_reserved())
  int64_t requested_bytes = 0;  // sizes asked for, before rounding
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t segments = 0;
  int64_t num_alloc_retries = 0;  // release_cached_blocks() then retry
  int64_t num_ooms = 0;
};

// Why an allocation failed, with the numbers PyTorch's OOM message gives.
struct OutOfMemory {
  int64_t requested = 0;
  int64_t capacity = 0;
  int64_t allocated = 0;
  int64_t reserved = 0;
};

class CachingAllocator {
 public:
  using BlockId = int32_t;

  explicit CachingAllocator(AllocatorConfig config);

  // A block of at least `size` bytes, or nullopt and last_oom() when the device is full.
  std::optional<BlockId> malloc(int64_t size);
  void free(BlockId block);
  // torch.cuda.empty_cache(): return every fully free segment.
  void empty_cache();

  const AllocatorStats& stats() const { return stats_; }
  const OutOfMemory& last_oom() const { return oom_; }
  // The size handed out for a block (what allocated_bytes counts for it).
  int64_t block_size(BlockId block) const;

  int64_t round_size(int64_t size) const;
  static int64_t get_allocation_size(int64_t size);

  // For replaying a recorded run (recorded_replay.h), whose addresses decide best-fit ties:
  // a segment made before the recording began, free in the given [from, to) byte ranges
  // (offsets, ascending, not touching) and allocated for good elsewhere; the address the next
  // segment gets; where a block starts.
  struct FreeRange {
    int64_t from = 0;
    int64_t to = 0;
  };
  void adopt_segment(int64_t address, int64_t size, bool small, std::span<const FreeRange> free);
  void place_next_segment(std::optional<int64_t> address) { next_segment_address_ = address; }
  int64_t block_address(BlockId block) const;

 private:
  struct Block {
    int64_t size = 0;
    int64_t requested = 0;
    int64_t address = 0;
    int32_t segment = -1;
    BlockId prev = -1;  // neighbours in the same segment, by address
    BlockId next = -1;
    bool allocated = false;
    bool small = false;
  };
  struct BlockKey {
    int64_t size;
    int64_t address;
    BlockId id;
    bool operator<(const BlockKey& o) const {
      return size != o.size ? size < o.size : address < o.address;
    }
  };
  struct Segment {
    int64_t address = 0;
    int64_t size = 0;  // mapped size for an expandable segment
    bool small = false;
    bool live = true;
    bool expandable = false;
  };
  // The free blocks of a pool, best fit first: PyTorch's std::set<Block*, BlockComparator> as a
  // sorted array. A pool holds tens to a few thousand blocks and a replay inserts and erases one
  // on most of its events; moving a few cache lines beats a tree node allocated per insert.
  class Pool {
   public:
    using iterator = std::vector<BlockKey>::iterator;
    iterator begin() { return keys_.begin(); }
    iterator end() { return keys_.end(); }
    iterator lower_bound(const BlockKey& key) {
      return std::lower_bound(keys_.begin(), keys_.end(), key);
    }
    void insert(const BlockKey& key) { keys_.insert(lower_bound(key), key); }
    iterator erase(iterator it) { return keys_.erase(it); }
    void erase(const BlockKey& key) {
      const iterator it = lower_bound(key);
      if (it != keys_.end() && !(key < *it)) keys_.erase(it);
    }
    // The blocks' ids, for a pass that erases and inserts as it goes.
    std::vector<BlockId> ids() const {
      std::vector<BlockId> out;
      out.reserve(keys_.size());
      for (const BlockKey& k : keys_) out.push_back(k.id);
      return out;
    }

   private:
    std::vector<BlockKey> keys_;
  };

  Pool& pool(bool small) { return small ? small_blocks_ : large_blocks_; }
  bool should_split(const Block& block, int64_t size) const;
  std::optional<BlockId> get_free_block(int64_t size, bool small);
  bool alloc_block(int64_t size, bool small, BlockId& out);
  bool alloc_expandable(int64_t size, bool small, BlockId& out);
  bool release_available_cached_blocks(int64_t size, bool small);
  void release_cached_blocks();
  // Returns a free, unsplit segment to CUDA.
  void release_block(BlockId id);
  void insert_free(BlockId id);
  void erase_free(BlockId id);
  BlockId new_block(const Block& b);
  void merge_free(BlockId id);
  void update_peaks();

  AllocatorConfig config_;
  AllocatorStats stats_;
  OutOfMemory oom_;
  IdVector<Block> blocks_;
  std::vector<BlockId> unused_ids_;
  IdVector<Segment> segments_;
  Pool small_blocks_;
  Pool large_blocks_;
  int64_t next_address_ = 0;
  std::optional<int64_t> next_segment_address_;   // place_next_segment
  std::array<int32_t, 2> expandable_ = {-1, -1};  // segment of the large / small pool
};

}  // namespace trainfit
