// Truncated and mutated files for the tests of trainfit's file parsers (traces, GPU and loader
// profiles): each must be refused with one line, or parse into something whole, never crash.
//
//   const int refused = fuzz_parser(text, 5, [](std::string_view t) {
//     return parse_gpu_profile(t, "fuzzed.json");
//   }, [](const GpuProfile& p) { EXPECT_FALSE(p.gemms.empty()); });
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>

namespace trainfit {

// Every `stride`-th truncation of `text` is refused with a one-line error; of 2000 copies with
// three random bytes changed, returns how many were refused (each with one line) and passes
// each one that parsed to `accepted`.
template <typename Parse, typename Accepted>
int fuzz_parser(const std::string& text, size_t stride, Parse parse, Accepted accepted) {
  for (size_t cut = 0; cut < text.size(); cut += stride) {
    const auto parsed = parse(std::string_view(text).substr(0, cut));
    EXPECT_FALSE(parsed.ok()) << "cut at " << cut;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().to_string().find('\n'), std::string::npos);
    }
  }
  std::mt19937 random(20261123);
  std::uniform_int_distribution<size_t> where(0, text.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string mutated = text;
    for (int j = 0; j < 3; ++j) mutated[where(random)] = static_cast<char>(byte(random));
    const auto parsed = parse(mutated);
    if (parsed.ok()) {
      accepted(*parsed);
      continue;
    }
    ++refused;
    EXPECT_EQ(parsed.status().to_string().find('\n'), std::string::npos);
  }
  return refused;
}

}  // namespace trainfit
