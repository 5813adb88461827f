#include "base/units.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace trainfit {

std::optional<double> parse_number(std::string_view text) {
  const std::string s(text);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != s.size()) return std::nullopt;
  return value;
}

std::optional<int64_t> parse_whole(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}
namespace {

struct Unit {
  std::string_view name;
  double scale;
};
constexpr std::array<Unit, 9> kSizeUnits = {{{"B", 1.0},
                                             {"KiB", 1024.0},
                                             {"MiB", 1024.0 * 1024},
                                             {"GiB", 1024.0 * 1024 * 1024},
                                             {"TiB", 1024.0 * 1024 * 1024 * 1024},
                                             {"KB", 1e3},
                                             {"MB", 1e6},
                                             {"GB", 1e9},
                                             {"TB", 1e12}}};

}  // namespace

Result<int64_t> parse_bytes(std::string_view text) {
  size_t split = 0;
  while (split < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[split])) || text[split] == '.')) {
    ++split;
  }
  const std::string number(text.substr(0, split));
  const std::string_view unit = text.substr(split);
  double scale = unit.empty() ? 1.0 : 0.0;
  for (const Unit& u : kSizeUnits) {
    if (u.name == unit) scale = u.scale;
  }
  if (scale == 0) {
    return parse_error(fmt::format("unknown size unit in '{}'", text),
                       "use B, KiB, MiB, GiB, TiB or KB, MB, GB, TB, e.g. 24GiB");
  }
  char* end = nullptr;
  const double v = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(v) || v <= 0) {
    return parse_error(fmt::format("'{}' is not a size", text), "for example 24GiB or 81920MiB");
  }
  const double bytes = v * scale;
  if (bytes >= 9.2e18) return out_of_range(fmt::format("size '{}' is too large", text));
  return static_cast<int64_t>(std::llround(bytes));
}

Result<double> parse_duration(std::string_view option, std::string_view text) {
  static constexpr std::array<Unit, 4> kTimeUnits = {
      {{"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"min", 60.0}}};
  size_t split = 0;
  while (split < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[split])) || text[split] == '.')) {
    ++split;
  }
  const std::string number(text.substr(0, split));
  std::string_view unit = text.substr(split);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  double scale = 0;
  for (const Unit& u : kTimeUnits) {
    if (u.name == unit) scale = u.scale;
  }
  char* end = nullptr;
  const double v = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (scale == 0 || number.empty() || end != number.c_str() + number.size() || !std::isfinite(v) ||
      v <= 0 || v * scale > 86400) {
    return parse_error(fmt::format("{}: '{}' is not a duration", option, text),
                       "a number above 0 with a unit (s, ms, us, min) up to a day, e.g. 80ms");
  }
  return v * scale;
}

Result<int64_t> parse_size(std::string_view option, std::string_view text) {
  Result<int64_t> bytes = parse_bytes(text);
  if (!bytes.ok()) return bytes.status().with_context(std::string(option));
  return bytes;
}

std::string format_bytes(int64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool negative = bytes < 0;
  double v = std::fabs(static_cast<double>(bytes));
  size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < kUnits.size()) {
    v /= 1024.0;
    ++unit;
  }
  std::string number;
  if (unit == 0) {
    number = fmt::format("{}", static_cast<int64_t>(v));
  } else if (v < 9.995) {
    number = fmt::format("{:.2f}", v);
  } else if (v < 99.95) {
    number = fmt::format("{:.1f}", v);
  } else {
    number = fmt::format("{:.0f}", v);
  }
  return fmt::format("{}{} {}", negative ? "-" : "", number, kUnits[unit]);
}

std::string format_count(int64_t n) {
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

namespace {

// Three significant digits of `value` (at least 0.001) followed by `unit`.
std::string three_digits(double value, std::string_view unit) {
  const int decimals = value >= 99.95 ? 0 : (value >= 9.995 ? 1 : (value >= 0.9995 ? 2 : 3));
  return fmt::format("{:.{}f} {}", value, decimals, unit);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "-";
  if (seconds < 0.9995) return three_digits(seconds * 1e3, "ms");
  if (seconds < 59.95) return three_digits(seconds, "s");
  const auto whole = static_cast<int64_t>(std::llround(seconds));
  if (whole < 3600) return fmt::format("{}m {:02}s", whole / 60, whole % 60);
  const int64_t minutes = (whole + 30) / 60;
  if (minutes < int64_t{24} * 60) return fmt::format("{}h {:02}m", minutes / 60, minutes % 60);
  const int64_t hours = (minutes + 30) / 60;
  return fmt::format("{}d {:02}h", hours / 24, hours % 24);
}

std::string size_arg(int64_t bytes) {
  static constexpr std::array<std::string_view, 4> kBinary = {"", "KiB", "MiB", "GiB"};
  size_t unit = 0;
  int64_t n = bytes;
  while (unit + 1 < kBinary.size() && n != 0 && n % 1024 == 0) {
    n /= 1024;
    ++unit;
  }
  return fmt::format("{}{}", n, kBinary[unit]);
}

}  // namespace trainfit
