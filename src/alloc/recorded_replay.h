// A recorded run's allocator events replayed through the caching-allocator model: the check
// that separates the allocator model's errors from the event list's. A GPU run recorded with
// torch.cuda.memory._record_memory_history gives every alloc and free with its size and
// address, and every segment PyTorch took from CUDA; fed the same requests, the model must
// open the same segments, put every block at the same address and reach the same peaks.
//
//   Result<RecordedStream> s = parse_recorded_stream(text);   // validation/snapshot_streams.py
//   RecordedReplay r = replay_recorded_stream(*s, AllocatorConfig{});
//   r.peak_reserved_bytes == s->peak_reserved_bytes, r.first_difference ...
//
// Note [Replaying a recording]
//  - Segments made before the recording began hold the parameters: they are adopted with the
//    free ranges the recording shows (validation/snapshot_streams.py says how it finds them),
//    the rest in use for good.
//  - A segment the recording opens takes the recorded address (place_next_segment), because
//    best fit breaks ties between equal free blocks by address and CUDA's addresses are not
//    the model's; everything else the model decides itself.
//  - A run of segment frees is torch.cuda.empty_cache() (cuDNN's benchmark mode calls it after
//    timing its candidates): the model empties its cache there and must free the same bytes.
//  - free_requested is ignored: on one stream the block is free at free_completed, which the
//    recording gives right after.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/allocator.h"
#include "base/status.h"

namespace trainfit {

struct RecordedSegment {
  int64_t address = 0;
  int64_t size = 0;
  bool small = false;
  std::vector<CachingAllocator::FreeRange> free;  // the rest was in use before recording
};

struct RecordedEvent {
  enum class Kind : uint8_t { kAlloc, kFree, kSegmentAlloc, kSegmentFree };
  Kind kind = Kind::kAlloc;
  int64_t size = 0;     // requested bytes (alloc), segment bytes (segment events)
  int64_t address = 0;  // where the block or segment is
  int32_t alloc = -1;   // kFree: which alloc it frees, counting allocs from 0
};

struct RecordedStream {
  std::string name;
  int64_t peak_allocated_bytes = 0;  // max_memory_allocated() of the recorded run
  int64_t peak_reserved_bytes = 0;   // max_memory_reserved()
  std::vector<RecordedSegment> before;
  std::vector<RecordedEvent> events;
};

// The text validation/snapshot_streams.py writes (its docstring gives the lines).
Result<RecordedStream> parse_recorded_stream(std::string_view text);

struct RecordedReplay {
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t segments_opened = 0;           // by the model, during the recording
  int64_t recorded_segments_opened = 0;  // by PyTorch
  int64_t misplaced_blocks = 0;          // allocations the model put at another address
  // The first event where the model did otherwise than PyTorch, said in a sentence.
  std::optional<std::string> first_difference;
};

RecordedReplay replay_recorded_stream(const RecordedStream& stream, const AllocatorConfig& config);

}  // namespace trainfit
