// One table per enum: the names it prints as and parses from, and the list a hint shows.
//
//   inline constexpr auto kPhaseNames = enum_names<Phase>(
//       {{Phase::kSetup, "setup"}, {Phase::kForward, "forward"}, ...});
//   kPhaseNames.name(Phase::kForward) == "forward"
//   kPhaseNames.parse("backward") == Phase::kBackward      // nullopt for an unknown name
//   kPhaseNames.list() == "setup, forward, backward or optimizer"
//   parse_enum(kPhaseNames, "--phase", "later")   // error: unknown --phase 'later' (hint: use ...)
//
// A table lists its names in the order users read them, which need not be the enum's order.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace trainfit {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

template <typename E, size_t N>
struct EnumNames {
  std::array<EnumName<E>, N> entries;

  constexpr std::string_view name(E value) const {
    for (const EnumName<E>& e : entries) {
      if (e.value == value) return e.name;
    }
    return "?";
  }
  constexpr std::optional<E> parse(std::string_view text) const {
    for (const EnumName<E>& e : entries) {
      if (e.name == text) return e.value;
    }
    return std::nullopt;
  }
  // "a, b or c"
  std::string list() const {
    std::string s;
    for (size_t i = 0; i < N; ++i) {
      if (i > 0) s += i + 1 == N ? " or " : ", ";
      s += entries[i].name;
    }
    return s;
  }
  constexpr size_t size() const { return N; }
};

// An option's value by name, or "unknown OPTION 'text'" with the names as the hint.
template <typename E, size_t N>
Result<E> parse_enum(const EnumNames<E, N>& names, std::string_view option, std::string_view text) {
  const std::optional<E> value = names.parse(text);
  if (!value) {
    return invalid_argument("unknown " + std::string(option) + " '" + std::string(text) + "'",
                            "use " + names.list());
  }
  return *value;
}

template <typename E, size_t N>
constexpr EnumNames<E, N> enum_names(const EnumName<E> (&entries)[N]) {
  EnumNames<E, N> table{};
  for (size_t i = 0; i < N; ++i) table.entries[i] = entries[i];
  return table;
}

}  // namespace trainfit
