// Every enum's name table (base/enum_names.h) names each value once: the names are unique,
// parse back to their value, and cover the values 0 .. size-1.
#include <gtest/gtest.h>

#include <set>

#include "graph/attrs.h"
#include "graph/graph.h"
#include "lower/events.h"
#include "lower/training.h"

namespace trainfit {
namespace {

template <typename Table>
void expect_complete(const Table& table, const char* what) {
  SCOPED_TRACE(what);
  std::set<std::string_view> names;
  std::set<int> values;
  for (const auto& e : table.entries) {
    EXPECT_TRUE(names.insert(e.name).second) << "name twice: " << e.name;
    EXPECT_TRUE(values.insert(static_cast<int>(e.value)).second) << "value twice: " << e.name;
    EXPECT_EQ(table.parse(e.name), e.value) << e.name;
    EXPECT_EQ(table.name(e.value), e.name);
  }
  for (size_t v = 0; v < table.size(); ++v) {
    EXPECT_TRUE(values.count(static_cast<int>(v))) << "value " << v << " has no name";
  }
}

TEST(EnumTables, NameEveryValueOnce) {
  expect_complete(kCategoryNames, "Category");
  EXPECT_EQ(kCategoryNames.size(), static_cast<size_t>(kCategoryCount));
  expect_complete(kPhaseNames, "Phase");
  expect_complete(kOptimizerNames, "OptimizerKind");
  expect_complete(kOptimizerImplNames, "OptimizerImpl");
  expect_complete(kPrecisionNames, "Precision");
  expect_complete(kDeviceNames, "Device");
  expect_complete(kAttrKindNames, "AttrKind");
}

TEST(EnumTables, HintsListNamesAsUsersTypeThem) {
  EXPECT_EQ(kOptimizerNames.list(),
            "sgd, momentum, adam, adamw, adam8bit, adamw8bit, paged_adamw or paged_adamw8bit");
  EXPECT_EQ(kOptimizerImplNames.list(), "default, foreach, fused or loop");
  EXPECT_EQ(kPrecisionNames.list(), "fp32, amp-fp16, amp-bf16 or bf16");
  EXPECT_EQ(kDeviceNames.list(), "cuda or cpu");
}

}  // namespace
}  // namespace trainfit
