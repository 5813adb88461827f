#include "base/enum_names.h"

#include <gtest/gtest.h>

namespace trainfit {
namespace {

enum class Fruit : uint8_t { kApple, kPear, kPlum };
constexpr auto kFruitNames =
    enum_names<Fruit>({{Fruit::kPlum, "plum"}, {Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}});

TEST(EnumNames, NamesParsesAndListsInTableOrder) {
  static_assert(kFruitNames.name(Fruit::kPear) == "pear");
  EXPECT_EQ(kFruitNames.parse("apple"), Fruit::kApple);
  EXPECT_EQ(kFruitNames.parse("Apple"), std::nullopt);
  EXPECT_EQ(kFruitNames.parse(""), std::nullopt);
  EXPECT_EQ(kFruitNames.list(), "plum, apple or pear");
  EXPECT_EQ(kFruitNames.name(static_cast<Fruit>(7)), "?");
  EXPECT_EQ(enum_names<Fruit>({{Fruit::kApple, "apple"}}).list(), "apple");
}

}  // namespace
}  // namespace trainfit
