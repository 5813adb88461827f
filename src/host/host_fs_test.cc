#include "host/host_fs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace trainfit {
namespace {

TEST(CpuList, ParsesRangesAndSingles) {
  struct Case {
    const char* text;
    std::vector<int> cpus;
  };
  const Case cases[] = {
      {"0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}},
      {"5", {5}},
      {" 0-1 \n", {0, 1}},
      {"", {}},
      {"3,1,1-2", {1, 2, 3}},
  };
  for (const Case& c : cases) {
    std::optional<std::vector<int>> got = parse_cpu_list(c.text);
    ASSERT_TRUE(got.has_value()) << c.text;
    EXPECT_EQ(*got, c.cpus) << c.text;
  }
}

TEST(CpuList, RejectsGarbage) {
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "0-99999999", "1.5", "0x3"}) {
    EXPECT_FALSE(parse_cpu_list(bad).has_value()) << bad;
  }
}

TEST(CpuList, FormatsRanges) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({7}), "7");
  EXPECT_EQ(format_cpu_list({}), "");
}

TEST(ParseInt, AcceptsOnlyWholeNumbers) {
  EXPECT_EQ(parse_int(" 42\n"), 42);
  EXPECT_EQ(parse_int("-1"), -1);
  EXPECT_FALSE(parse_int("4x").has_value());
  EXPECT_FALSE(parse_int("").has_value());
  EXPECT_FALSE(parse_int("99999999999999999999").has_value());
}

class TempTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("trainfit_fs_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void put(const std::string& path, const std::string& text) {
    const std::filesystem::path full = root_ / path.substr(1);
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full, std::ios::binary) << text;
  }
  std::filesystem::path root_;
};

TEST_F(TempTree, ReadsUnderTheRootOnly) {
  put("/sys/a/value", "  17 \nsecond line\n");
  put("/sys/a/b/x", "");
  const HostFs fs(root_.string());
  EXPECT_FALSE(fs.is_live());
  EXPECT_EQ(fs.read_line("/sys/a/value"), "17");
  EXPECT_EQ(fs.read_int("/sys/a/value"), 17);
  EXPECT_EQ(fs.list("/sys/a"), (std::vector<std::string>{"b", "value"}));
  EXPECT_TRUE(fs.exists("/sys/a/b"));
  EXPECT_FALSE(fs.read("/sys/missing").has_value());
  EXPECT_TRUE(fs.list("/nowhere").empty());
}

TEST_F(TempTree, RecordedStatvfs) {
  put("/statvfs", "/dev/shm 67108864 66060288\n/ 1000 10\n");
  const HostFs fs(root_.string());
  std::optional<FsSpace> shm = fs.space("/dev/shm");
  ASSERT_TRUE(shm.has_value());
  EXPECT_EQ(shm->total_bytes, 67108864);
  EXPECT_EQ(shm->free_bytes, 66060288);
  EXPECT_FALSE(fs.space("/tmp").has_value());
  put("/statvfs", "/dev/shm lots none\n");
  EXPECT_FALSE(fs.space("/dev/shm").has_value());
}

TEST(HostFsLive, ReadsThisMachine) {
  const HostFs fs;
  EXPECT_TRUE(fs.is_live());
  EXPECT_TRUE(fs.read("/proc/self/status").has_value());
  EXPECT_TRUE(fs.space("/").has_value());
}

}  // namespace
}  // namespace trainfit
