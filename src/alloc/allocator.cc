#include "alloc/allocator.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "base/check.h"

namespace trainfit {
namespace {

constexpr CachingAllocator::BlockId kEmptyBlock = -2;  // a zero-byte request: never allocated

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// floor(log2(size)) - 20, clamped to the 16 configurable intervals (1 MiB ... 64 GiB).
int interval_of(int64_t size) {
  const int log2 = 63 - std::countl_zero(static_cast<uint64_t>(size));
  return std::clamp(log2 - 20, 0, kRoundUpPowerOfTwoIntervals - 1);
}

// roundup_power2_next_division: the next multiple of (the power of two below size) / divisions.
int64_t roundup_power2_next_division(int64_t size, int divisions) {
  const auto u = static_cast<uint64_t>(size);
  if (std::has_single_bit(u)) return size;
  const uint64_t floor = std::bit_floor(u);
  const uint64_t step = floor >> (63 - std::countl_zero(static_cast<uint64_t>(divisions)));
  if (step == 0) return static_cast<int64_t>(floor << 1);
  const uint64_t rounded_floor = u & ~(step - 1);
  return static_cast<int64_t>(rounded_floor == u ? u : rounded_floor + step);
}

}  // namespace

CachingAllocator::CachingAllocator(AllocatorConfig config) : config_(config) {}

int64_t CachingAllocator::round_size(int64_t size) const {
  if (size < kMinBlockSize) return kMinBlockSize;
  const int divisions = config_.roundup_power2_divisions[static_cast<size_t>(interval_of(size))];
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    return roundup_power2_next_division(size, divisions);
  }
  return round_up(size, kMinBlockSize);
}

int64_t CachingAllocator::get_allocation_size(int64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(size, kRoundLarge);
}

int64_t CachingAllocator::block_size(BlockId block) const {
  if (block == kEmptyBlock) return 0;
  return blocks_[block].size;
}

int64_t CachingAllocator::block_address(BlockId block) const {
  if (block == kEmptyBlock) return 0;
  return blocks_[block].address;
}

void CachingAllocator::adopt_segment(int64_t address, int64_t size, bool small,
                                     std::span<const FreeRange> free) {
  Segment seg;
  seg.address = address;
  seg.size = size;
  seg.small = small;
  const int32_t segment = segments_.next_id();
  segments_.push_back(seg);
  next_address_ = std::max(next_address_, address + size + kRoundLarge);
  ++stats_.segments;
  stats_.reserved_bytes += size;
  BlockId last = -1;
  const auto add = [&](int64_t from, int64_t to, bool allocated) {
    if (to <= from) return;
    Block b;
    b.size = to - from;
    b.address = address + from;
    b.segment = segment;
    b.small = small;
    b.allocated = allocated;
    b.requested = allocated ? b.size : 0;
    b.prev = last;
    const BlockId id = new_block(b);
    if (last >= 0) blocks_[last].next = id;
    last = id;
    if (allocated) {
      stats_.allocated_bytes += b.size;
      stats_.requested_bytes += b.size;
    } else {
      insert_free(id);
    }
  };
  int64_t at = 0;
  for (const FreeRange& r : free) {
    TF_CHECK(r.from >= at && r.to > r.from && r.to <= size)
        << "free range " << r.from << ".." << r.to << " of a " << size;
    add(at, r.from, true);
    add(r.from, r.to, false);
    at = r.to;
  }
  add(at, size, true);
  update_peaks();
}

CachingAllocator::BlockId CachingAllocator::new_block(const Block& b) {
  if (!unused_ids_.empty()) {
    const BlockId id = unused_ids_.back();
    unused_ids_.pop_back();
    blocks_[id] = b;
    return id;
  }
  const BlockId id = blocks_.next_id();
  blocks_.push_back(b);
  return id;
}

void CachingAllocator::insert_free(BlockId id) {
  const Block& b = blocks_[id];
  pool(b.small).insert({b.size, b.address, id});
}

void CachingAllocator::erase_free(BlockId id) {
  const Block& b = blocks_[id];
  pool(b.small).erase({b.size, b.address, id});
}

bool CachingAllocator::should_split(const Block& block, int64_t size) const {
  const int64_t remaining = block.size - size;
  if (block.small || segments_[block.segment].expandable) {
    return remaining >= kMinBlockSize;
  }
  const bool under_max = config_.max_split_size < 0 || size < config_.max_split_size;
  return under_max && remaining > kSmallSize;
}

std::optional<CachingAllocator::BlockId> CachingAllocator::get_free_block(int64_t size,
                                                                          bool small) {
  Pool& p = pool(small);
  const auto it = p.lower_bound({size, std::numeric_limits<int64_t>::min(), -1});
  if (it == p.end()) return std::nullopt;
  const int64_t found = it->size;
  if (config_.max_split_size >= 0) {
    // Do not use an oversize block for a normal request, nor one much larger than an oversize
    // request.
    if (size < config_.max_split_size && found >= config_.max_split_size) return std::nullopt;
    if (size >= config_.max_split_size && found >= size + config_.max_non_split_rounding) {
      return std::nullopt;
    }
  }
  const BlockId id = it->id;
  p.erase(it);
  return id;
}

bool CachingAllocator::alloc_block(int64_t size, bool small, BlockId& out) {
  if (config_.expandable_segments) return alloc_expandable(size, small, out);
  const int64_t alloc_size = get_allocation_size(size);
  if (config_.capacity >= 0 && stats_.reserved_bytes + alloc_size > config_.capacity) {
    return false;
  }
  Segment seg;
  seg.address = next_segment_address_.value_or(next_address_);
  next_segment_address_.reset();
  seg.size = alloc_size;
  seg.small = small;
  next_address_ = std::max(next_address_, seg.address + alloc_size + kRoundLarge);
  Block b;
  b.size = alloc_size;
  b.address = seg.address;
  b.segment = segments_.next_id();
  segments_.push_back(seg);
  b.small = small;
  out = new_block(b);
  stats_.reserved_bytes += alloc_size;
  ++stats_.segments;
  return true;
}

// Expandable segments: one growing virtual range per pool; map whole pages at its end to extend
// the free block there (or a new one) until it fits the request.
bool CachingAllocator::alloc_expandable(int64_t size, bool small, BlockId& out) {
  const int64_t page = small ? kSmallBuffer : kLargeBuffer;
  int32_t& seg_id = expandable_[small ? 1 : 0];
  if (seg_id < 0) {
    Segment seg;
    seg.address = next_address_;
    seg.size = 0;
    seg.small = small;
    seg.expandable = true;
    next_address_ += int64_t{1} << 46;
    seg_id = segments_.next_id();
    segments_.push_back(seg);
    ++stats_.segments;
  }
  Segment& seg = segments_[seg_id];
  // The block ending at the mapped end, if free, grows.
  BlockId tail = -1;
  for (BlockId i = 0; i < blocks_.next_id(); ++i) {
    const Block& b = blocks_[i];
    if (b.segment == seg_id && b.size > 0 && b.address + b.size == seg.address + seg.size &&
        std::find(unused_ids_.begin(), unused_ids_.end(), i) == unused_ids_.end()) {
      tail = i;
      break;
    }
  }
  const bool tail_free = tail >= 0 && !blocks_[tail].allocated;
  const int64_t have = tail_free ? blocks_[tail].size : 0;
  const int64_t mapped = round_up(size - have, page);
  if (config_.capacity >= 0 && stats_.reserved_bytes + mapped > config_.capacity) return false;
  stats_.reserved_bytes += mapped;
  if (tail_free) {
    erase_free(tail);
    blocks_[tail].size += mapped;
    out = tail;
  } else {
    Block b;
    b.size = mapped;
    b.address = seg.address + seg.size;
    b.segment = seg_id;
    b.small = small;
    b.prev = tail;
    out = new_block(b);
    if (tail >= 0) blocks_[tail].next = out;
  }
  seg.size += mapped;
  return true;
}

void CachingAllocator::update_peaks() {
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

std::optional<CachingAllocator::BlockId> CachingAllocator::malloc(int64_t size) {
  TF_CHECK(size >= 0) << "negative allocation";
  if (size == 0) return kEmptyBlock;
  const int64_t rounded = round_size(size);
  const bool small = rounded <= kSmallSize;
  BlockId id = -1;
  if (auto found = get_free_block(rounded, small)) {
    id = *found;
  } else if (!alloc_block(rounded, small, id) &&
             !(release_available_cached_blocks(rounded, small) &&
               alloc_block(rounded, small, id))) {
    // Free every cached segment and try once more before giving up.
    release_cached_blocks();
    ++stats_.num_alloc_retries;
    if (!alloc_block(rounded, small, id)) {
      ++stats_.num_ooms;
      oom_ = {size, config_.capacity, stats_.allocated_bytes, stats_.reserved_bytes};
      return std::nullopt;
    }
  }
  Block& b = blocks_[id];
  if (should_split(b, rounded)) {
    Block rest;
    rest.size = b.size - rounded;
    rest.address = b.address + rounded;
    rest.segment = b.segment;
    rest.small = b.small;
    rest.prev = id;
    rest.next = b.next;
    b.size = rounded;
    const BlockId rest_id = new_block(rest);  // may move blocks_: no reference across it
    Block& bb = blocks_[id];
    if (bb.next >= 0) blocks_[bb.next].prev = rest_id;
    bb.next = rest_id;
    insert_free(rest_id);
  }
  Block& block = blocks_[id];
  block.allocated = true;
  block.requested = size;
  stats_.allocated_bytes += block.size;
  stats_.requested_bytes += size;
  update_peaks();
  return id;
}

void CachingAllocator::merge_free(BlockId id) {
  Block& b = blocks_[id];
  const BlockId prev = b.prev;
  if (prev >= 0 && !blocks_[prev].allocated) {
    erase_free(prev);
    Block& p = blocks_[prev];
    b.address = p.address;
    b.size += p.size;
    b.prev = p.prev;
    if (b.prev >= 0) blocks_[b.prev].next = id;
    p = Block{};
    unused_ids_.push_back(prev);
  }
  const BlockId next = b.next;
  if (next >= 0 && !blocks_[next].allocated) {
    erase_free(next);
    Block& n = blocks_[next];
    b.size += n.size;
    b.next = n.next;
    if (b.next >= 0) blocks_[b.next].prev = id;
    n = Block{};
    unused_ids_.push_back(next);
  }
  insert_free(id);
}

void CachingAllocator::free(BlockId id) {
  if (id == kEmptyBlock) return;
  Block& b = blocks_[id];
  TF_CHECK(b.allocated) << "double free of block " << id;
  b.allocated = false;
  stats_.allocated_bytes -= b.size;
  stats_.requested_bytes -= b.requested;
  b.requested = 0;
  merge_free(id);
}

// Oversize blocks are never split, so a cached one is a whole segment. The smallest that covers
// the request (and max_split_size) goes back; without one, the largest go back, one after another,
// until they add up to it. Expandable segments keep theirs.
bool CachingAllocator::release_available_cached_blocks(int64_t size, bool small) {
  if (config_.max_split_size < 0) return false;
  Pool& p = pool(small);
  const int64_t wanted = std::max(size, config_.max_split_size);
  const auto releasable = [&](Pool::iterator it) {
    const Block& b = blocks_[it->id];
    return !segments_[b.segment].expandable && b.prev < 0 && b.next < 0;
  };
  auto it = p.lower_bound({wanted, std::numeric_limits<int64_t>::min(), -1});
  if (it != p.end() && releasable(it)) {
    release_block(it->id);
    return true;
  }
  if (it == p.begin()) return false;
  int64_t released = 0;
  --it;  // the largest cached block
  while (released < wanted && it->size >= config_.max_split_size) {
    const auto current = it;
    const bool first = current == p.begin();
    if (!first) --it;
    if (releasable(current)) {
      released += current->size;
      release_block(current->id);
    }
    if (first) break;
  }
  return released >= wanted;
}

void CachingAllocator::release_block(BlockId id) {
  Block& b = blocks_[id];
  erase_free(id);
  stats_.reserved_bytes -= b.size;
  --stats_.segments;
  segments_[b.segment].live = false;
  b = Block{};
  unused_ids_.push_back(id);
}

void CachingAllocator::release_cached_blocks() {
  for (Pool* p : {&small_blocks_, &large_blocks_}) {
    // Each block cached when the pass began, in best-fit order; a block the pass shrinks goes
    // back in before the ones still to visit and is not visited again.
    for (const BlockId id : p->ids()) {
      Block& b = blocks_[id];
      Segment& seg = segments_[b.segment];
      if (seg.expandable) {
        // Unmap the whole free pages at the end of the mapped range.
        const int64_t page = seg.small ? kSmallBuffer : kLargeBuffer;
        const int64_t end = seg.address + seg.size;
        if (b.address + b.size != end) continue;
        const int64_t keep_end = seg.address + round_up(b.address - seg.address, page);
        const int64_t released = end - std::max(keep_end, b.address);
        if (released <= 0) continue;
        p->erase({b.size, b.address, id});
        seg.size -= released;
        stats_.reserved_bytes -= released;
        b.size -= released;
        if (b.size > 0) {
          p->insert({b.size, b.address, id});
        } else {
          if (b.prev >= 0) blocks_[b.prev].next = -1;
          b = Block{};
          unused_ids_.push_back(id);
        }
        continue;
      }
      if (b.prev < 0 && b.next < 0) release_block(id);
    }
  }
}

void CachingAllocator::empty_cache() {
  release_cached_blocks();
}

}  // namespace trainfit
