#include "alloc/recorded_replay.h"

#include <fmt/format.h>

#include <charconv>

namespace trainfit {
namespace {

// Splits a line into its words.
std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

std::optional<int64_t> number(std::string_view word) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (ec != std::errc() || end != word.data() + word.size() || v < 0) return std::nullopt;
  return v;
}

constexpr int64_t kAddressUnit = 512;  // the file gives addresses in 512-byte units

}  // namespace

Result<RecordedStream> parse_recorded_stream(std::string_view text) {
  RecordedStream s;
  int line_no = 0;
  int32_t allocs = 0;
  std::optional<int64_t> end;
  const auto bad = [&](std::string_view why) {
    return parse_error(fmt::format("recorded stream, line {}: {}", line_no, why),
                       "write it with validation/snapshot_streams.py");
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    const std::vector<std::string_view> w = words_of(line);
    if (w.empty()) continue;
    if (end) return bad("a line after the end line");
    std::vector<int64_t> n;
    for (size_t i = 1; i < w.size(); ++i) {
      if (w[0] == "case") break;
      const std::optional<int64_t> v = number(w[i]);
      if (!v) return bad(fmt::format("'{}' is not a non-negative whole number", w[i]));
      n.push_back(*v);
    }
    const auto expect = [&](size_t count) { return n.size() == count; };
    const auto address = [](int64_t units) { return units * kAddressUnit; };
    constexpr int64_t kMaxAddressUnits = int64_t{1} << 50;
    for (size_t i = 0; i < n.size(); ++i) {
      if (n[i] > kMaxAddressUnits) return bad("a number beyond any device's memory");
    }
    using Kind = RecordedEvent::Kind;
    if (w[0] == "case" && w.size() == 2) {
      s.name = std::string(w[1]);
    } else if (w[0] == "peak" && expect(2)) {
      s.peak_allocated_bytes = n[0];
      s.peak_reserved_bytes = n[1];
    } else if (w[0] == "pre" && n.size() >= 3 && n.size() % 2 == 1 && n[2] <= 1 && n[1] > 0) {
      RecordedSegment seg{address(n[0]), n[1], n[2] == 1, {}};
      int64_t at = 0;
      for (size_t i = 3; i < n.size(); i += 2) {
        if (n[i] < at || n[i + 1] <= n[i] || n[i + 1] > seg.size) {
          return bad("free ranges must ascend inside the segment");
        }
        seg.free.push_back({n[i], n[i + 1]});
        at = n[i + 1];
      }
      s.before.push_back(std::move(seg));
    } else if (w[0] == "a" && expect(2)) {
      s.events.push_back({Kind::kAlloc, n[0], address(n[1]), allocs++});
    } else if (w[0] == "f" && expect(1)) {
      if (n[0] >= allocs) return bad("a free of a block not yet allocated");
      s.events.push_back({Kind::kFree, 0, 0, static_cast<int32_t>(n[0])});
    } else if ((w[0] == "s" || w[0] == "S") && expect(2) && n[1] > 0) {
      s.events.push_back(
          {w[0] == "s" ? Kind::kSegmentAlloc : Kind::kSegmentFree, n[1], address(n[0]), -1});
    } else if (w[0] == "end" && expect(1)) {
      end = n[0];
    } else {
      return bad(fmt::format("'{}' is not a line of a recorded stream", line.substr(0, 40)));
    }
  }
  if (!end) return bad("no end line: the file is cut short");
  if (*end != static_cast<int64_t>(s.events.size())) {
    return bad(
        fmt::format("the end line counts {} events, the file has {}", *end, s.events.size()));
  }
  if (s.name.empty()) return bad("no case line");
  return s;
}

RecordedReplay replay_recorded_stream(const RecordedStream& stream, const AllocatorConfig& config) {
  RecordedReplay r;
  CachingAllocator a(config);
  for (const RecordedSegment& seg : stream.before) {
    a.adopt_segment(seg.address, seg.size, seg.small, seg.free);
  }
  const auto differ = [&](size_t event, std::string what) {
    if (!r.first_difference) r.first_difference = fmt::format("event {}: {}", event, what);
  };
  std::vector<CachingAllocator::BlockId> blocks;
  std::vector<bool> live;
  std::optional<RecordedEvent> opening;  // the recording's segment for the next alloc
  int64_t to_release = 0;                // the recording's run of segment frees
  int64_t reserved_before_release = 0;
  using Kind = RecordedEvent::Kind;
  bool stop = false;  // after a difference the replay cannot go on from
  for (size_t i = 0; i < stream.events.size() && !stop; ++i) {
    const RecordedEvent& e = stream.events[i];
    if (e.kind != Kind::kSegmentFree && to_release > 0) {
      const int64_t released = reserved_before_release - a.stats().reserved_bytes;
      if (released != to_release) {
        differ(i, fmt::format("empty_cache() freed {} bytes, the model {}", to_release, released));
      }
      to_release = 0;
    }
    switch (e.kind) {
      case Kind::kSegmentAlloc:
        opening = e;
        ++r.recorded_segments_opened;
        break;
      case Kind::kSegmentFree:
        if (to_release == 0) {
          reserved_before_release = a.stats().reserved_bytes;
          a.empty_cache();
        }
        to_release += e.size;
        break;
      case Kind::kFree: {
        const auto b = static_cast<size_t>(e.alloc);
        if (!live[b]) {
          differ(i, fmt::format("a second free of allocation {}", e.alloc));
          stop = true;
          break;
        }
        live[b] = false;
        a.free(blocks[b]);
        break;
      }
      case Kind::kAlloc: {
        const int64_t segments = a.stats().segments;
        const int64_t reserved = a.stats().reserved_bytes;
        a.place_next_segment(opening ? std::optional<int64_t>(opening->address) : std::nullopt);
        const std::optional<CachingAllocator::BlockId> id = a.malloc(e.size);
        a.place_next_segment(std::nullopt);
        if (!id) {
          differ(i, fmt::format("the model ran out of memory for {} bytes", e.size));
          stop = true;
          break;
        }
        blocks.push_back(*id);
        live.push_back(true);
        const int64_t opened = a.stats().reserved_bytes - reserved;
        if (a.stats().segments > segments) {
          ++r.segments_opened;
          if (!opening) {
            differ(i, fmt::format("the model opens a {}-byte segment for {} bytes, PyTorch does "
                                  "not",
                                  opened, e.size));
          } else if (opened != opening->size) {
            differ(i, fmt::format("PyTorch opens a {}-byte segment for {} bytes, the model {}",
                                  opening->size, e.size, opened));
          }
        } else if (opening) {
          differ(i, fmt::format("PyTorch opens a {}-byte segment for {} bytes, the model reuses "
                                "a cached block",
                                opening->size, e.size));
        }
        opening.reset();
        if (a.block_address(*id) != e.address) {
          ++r.misplaced_blocks;
          differ(i, fmt::format("{} bytes placed {} bytes from where PyTorch put them", e.size,
                                a.block_address(*id) - e.address));
        }
        break;
      }
    }
  }
  r.peak_allocated_bytes = a.stats().peak_allocated_bytes;
  r.peak_reserved_bytes = a.stats().peak_reserved_bytes;
  return r;
}

}  // namespace trainfit
