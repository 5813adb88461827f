// The allocator model against PyTorch's own allocator: every recorded H100 run
// (tests/data/allocator_streams, from validation/gpu_results/NVIDIA_H100_80GB_HBM3/
// snapshots.tar.xz by validation/snapshot_streams.py) replayed request by request.
#include "alloc/recorded_replay.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sources/parser_fuzz_test_util.h"

namespace trainfit {
namespace {

std::string read(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::filesystem::path> recorded_streams() {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(TRAINFIT_TEST_DATA_DIR) / "allocator_streams")) {
    if (entry.path().extension() == ".txt") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST(RecordedReplay, EveryH100RecordingMatchesToTheByte) {
  const std::vector<std::filesystem::path> paths = recorded_streams();
  ASSERT_EQ(paths.size(), 49U);
  for (const auto& path : paths) {
    const Result<RecordedStream> s = parse_recorded_stream(read(path));
    ASSERT_TRUE(s.ok()) << path << ": " << s.status().to_string();
    const RecordedReplay r = replay_recorded_stream(*s, {});
    EXPECT_EQ(r.first_difference, std::nullopt) << s->name;
    EXPECT_EQ(r.segments_opened, r.recorded_segments_opened) << s->name;
    EXPECT_EQ(r.misplaced_blocks, 0) << s->name;
    EXPECT_EQ(r.peak_allocated_bytes, s->peak_allocated_bytes) << s->name;
    EXPECT_EQ(r.peak_reserved_bytes, s->peak_reserved_bytes) << s->name;
  }
}

TEST(RecordedReplay, ReadsEachLine) {
  const Result<RecordedStream> s = parse_recorded_stream(
      "case X:tiny\npeak 1536 2097152\npre 0 2097152 1 512 2097152\n"
      "a 1000 1\nf 0\nend 2\n");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->name, "X:tiny");
  ASSERT_EQ(s->before.size(), 1U);
  EXPECT_TRUE(s->before[0].small);
  ASSERT_EQ(s->events.size(), 2U);
  EXPECT_EQ(s->events[0].address, 512);
  const RecordedReplay r = replay_recorded_stream(*s, {});
  EXPECT_EQ(r.first_difference, std::nullopt);
  EXPECT_EQ(r.peak_allocated_bytes, 1536);
  EXPECT_EQ(r.peak_reserved_bytes, 2097152);
}

// A recording the model does not follow says where: here PyTorch placed the block at the
// segment's start, which the model cannot (its parameters are there).
TEST(RecordedReplay, SaysWhereTheModelDiffers) {
  const Result<RecordedStream> s = parse_recorded_stream(
      "case X:moved\npeak 0 0\npre 0 2097152 1 512 2097152\na 1000 0\nend 1\n");
  ASSERT_TRUE(s.ok());
  const RecordedReplay r = replay_recorded_stream(*s, {});
  EXPECT_EQ(r.misplaced_blocks, 1);
  EXPECT_EQ(r.first_difference, "event 0: 1000 bytes placed 512 bytes from where PyTorch put them");
}

// The head of a recording with its own end line: a whole file, small enough to fuzz.
std::string whole_head(const std::string& text, int events) {
  std::istringstream in(text);
  std::string out;
  int kept = 0;
  for (std::string line; kept < events && std::getline(in, line);) {
    out += line + "\n";
    kept +=
        line.size() > 1 && line[1] == ' ' && std::string("asfS").find(line[0]) != std::string::npos;
  }
  return out + "end " + std::to_string(kept) + "\n";
}

TEST(RecordedReplay, RefusesTruncatedAndGarbledFiles) {
  const std::string head = whole_head(read(recorded_streams().front()), 80);
  ASSERT_TRUE(parse_recorded_stream(head).ok());
  const int refused = fuzz_parser(head, 7, parse_recorded_stream, [](const RecordedStream& s) {
    EXPECT_FALSE(s.name.empty());
    (void)replay_recorded_stream(s, {});  // whatever it reads, the replay must not crash
  });
  EXPECT_GT(refused, 500);
  for (const char* bad :
       {"", "case\n", "case A\npeak 1\nend 0\n", "case A\nf 0\nend 1\n", "case A\na -5 0\nend 1\n",
        "case A\nend 0\nend 0\n", "case A\na 1 99999999999999999999\nend 1\n"}) {
    EXPECT_FALSE(parse_recorded_stream(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace trainfit
