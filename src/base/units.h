// Sizes and counts as people write and read them.
//
//   parse_bytes("24GiB") == 25769803776; parse_bytes("24GB") == 24000000000
//   format_bytes(102760448) == "98.0 MiB"; format_count(25557032) == "25,557,032"
//   size_arg(25769803776) == "24GiB"        // exact, for command lines that parse back
//   format_duration(0.0123) == "12.3 ms"; format_duration(4000) == "1h 07m"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace trainfit {

// The number `text` spells, all of it ("0.05", "1e-4"), or nullopt.
std::optional<double> parse_number(std::string_view text);
// The whole number `text` spells, all of it, within int64; or nullopt.
std::optional<int64_t> parse_whole(std::string_view text);

// "24GiB", "24GB" (10^9), "24576MiB", "512MB", "1000000" (bytes).
Result<int64_t> parse_bytes(std::string_view text);

// An option's size, its name in the error ("--gpu-memory: unknown size unit in 'lots'").
Result<int64_t> parse_size(std::string_view option, std::string_view text);

// "80ms", "0.08s", "250us", "2min" (a unit is required), above 0 and at most a day; the option's
// name in the error.
Result<double> parse_duration(std::string_view option, std::string_view text);

// Binary units with three significant digits: "512 B", "1.50 KiB", "98.0 MiB", "3.01 GiB".
std::string format_bytes(int64_t bytes);
// Thousands separators: "25,557,032".
std::string format_count(int64_t n);
// Durations: three significant digits below a minute ("0.412 ms", "12.3 ms", "1.25 s"), then
// minutes and seconds ("4m 05s"), hours and minutes ("3h 12m"), days and hours ("2d 04h").
std::string format_duration(double seconds);
// The size exactly, in the largest binary unit that divides it ("500MiB", "24GiB", "1000"):
// parse_bytes reads it back to the same number of bytes.
std::string size_arg(int64_t bytes);

}  // namespace trainfit
