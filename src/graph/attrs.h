// Op attributes: a small, ordered name -> value map.
//
//   Attrs a{{"out_channels", 64}, {"kernel_size", Dims{7, 7}}, {"bias", false}};
//   a.get_int("out_channels") == 64
//   a.get_ints("kernel_size", 2) == Dims{7, 7}      // a single int expands to both dims
//
// The registry fills defaults and checks types before an op's rules read them, so the getters
// treat a missing or mistyped attribute as a bug.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/enum_names.h"
#include "graph/shape.h"

namespace trainfit {

using AttrValue = std::variant<int64_t, double, bool, std::string, Dims>;

enum class AttrKind : uint8_t { kInt, kFloat, kBool, kString, kInts };

inline constexpr auto kAttrKindNames = enum_names<AttrKind>({
    {AttrKind::kInt, "int"},
    {AttrKind::kFloat, "float"},
    {AttrKind::kBool, "bool"},
    {AttrKind::kString, "string"},
    {AttrKind::kInts, "int list"},
});
inline std::string_view attr_kind_name(AttrKind kind) {
  return kAttrKindNames.name(kind);
}
std::string attr_value_string(const AttrValue& value);

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string_view, AttrValue>> items);

  Attrs& set(std::string_view name, AttrValue value);
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const AttrValue* find(std::string_view name) const;

  int64_t get_int(std::string_view name) const;
  double get_float(std::string_view name) const;  // an int attribute reads as a float
  bool get_bool(std::string_view name) const;
  const std::string& get_string(std::string_view name) const;
  // A list attribute; a single int is repeated `n` times; a list must have `n` entries.
  Dims get_ints(std::string_view name, size_t n) const;
  const Dims& get_ints(std::string_view name) const;

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace trainfit
