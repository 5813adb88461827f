#include "base/units.h"

#include <gtest/gtest.h>

#include "base/suggest.h"

namespace trainfit {
namespace {

TEST(Units, FormatsBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(102'760'448), "98.0 MiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(format_bytes(int64_t{200} << 30), "200 GiB");
  EXPECT_EQ(format_bytes(-2048), "-2.00 KiB");
}

TEST(Units, FormatsCounts) {
  EXPECT_EQ(format_count(25'557'032), "25,557,032");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(-1000), "-1,000");
}

TEST(Units, FormatsDurations) {
  EXPECT_EQ(format_duration(0.000412), "0.412 ms");
  EXPECT_EQ(format_duration(0.0123), "12.3 ms");
  EXPECT_EQ(format_duration(0.1234), "123 ms");
  EXPECT_EQ(format_duration(0.9999), "1.00 s");
  EXPECT_EQ(format_duration(1.25), "1.25 s");
  EXPECT_EQ(format_duration(59.99), "1m 00s");
  EXPECT_EQ(format_duration(245), "4m 05s");
  EXPECT_EQ(format_duration(4000), "1h 07m");
  EXPECT_EQ(format_duration(3 * 86400 + 4 * 3600), "3d 04h");
  EXPECT_EQ(format_duration(-1), "-");
}

TEST(Units, ParsesSizes) {
  EXPECT_EQ(*parse_bytes("24GiB"), int64_t{24} << 30);
  EXPECT_EQ(*parse_bytes("24GB"), 24'000'000'000);
  EXPECT_EQ(*parse_bytes("1.5MiB"), int64_t{3} << 19);
  EXPECT_EQ(*parse_bytes("1000"), 1000);
  EXPECT_EQ(*parse_bytes("512B"), 512);
  for (const char* bad :
       {"", "GiB", "24 GiB", "24gib", "-1GiB", "0", "1e3GiB", "9999999999TiB", "24GiBs", "lots"}) {
    EXPECT_FALSE(parse_bytes(bad).ok()) << bad;
  }
}

TEST(Units, SizeArgumentsParseBackExactly) {
  EXPECT_EQ(size_arg(int64_t{24} << 30), "24GiB");
  EXPECT_EQ(size_arg(int64_t{500} << 20), "500MiB");
  EXPECT_EQ(size_arg(int64_t{3} << 19), "1536KiB");
  EXPECT_EQ(size_arg(1000), "1000");
  for (int64_t bytes : {int64_t{1}, int64_t{1023}, int64_t{1} << 40, int64_t{81920} << 20,
                        int64_t{12'884'901'888}, int64_t{24'000'000'000}}) {
    EXPECT_EQ(*parse_bytes(size_arg(bytes)), bytes) << size_arg(bytes);
  }
}

TEST(Suggest, NamesTheClosestKnownName) {
  const std::vector<std::string> commands = {"estimate", "fit", "compare", "summary"};
  EXPECT_EQ(closest("estmate", commands), "estimate");
  EXPECT_EQ(closest("sumary", commands), "summary");
  EXPECT_EQ(closest("frobnicate", commands), "");
  EXPECT_EQ(closest("", {}), "");
}

}  // namespace
}  // namespace trainfit
