// Memory budgets: parsing, and the knapsack that picks the cheapest plans.
#include "memory/budget.h"

#include <gtest/gtest.h>

#include "onnxtrain/error.h"

using namespace onnxtrain;
using memory::Item;

TEST(Budget, TheCheapestSubsetThatSavesEnough) {
  std::vector<Item> items = {{6, 5}, {4, 3}, {3, 3}, {2, 1}};
  memory::Choice c = memory::choose_cheapest(items, 6);
  EXPECT_TRUE(c.met);
  EXPECT_EQ(c.chosen, (std::vector<size_t>{1, 3}));  // 4 + 2 bytes for 4, not 6 bytes for 5
  EXPECT_EQ(c.saved, 6);
  EXPECT_TRUE(memory::choose_cheapest(items, 0).chosen.empty());
  memory::Choice all = memory::choose_cheapest(items, 100);
  EXPECT_FALSE(all.met);
  EXPECT_EQ(all.chosen.size(), 4u);
}

TEST(Budget, HugeNeedsUseCoarserUnitsAndStillSaveEnough) {
  std::vector<Item> items;
  for (int i = 0; i < 200; ++i) items.push_back({int64_t(1000003) * (i % 7 + 1) + i, 1 + i % 5});  // gcd 1
  int64_t need = int64_t(500) << 20;  // of about 800 MiB in all: 2^16 units would be 8 KiB each
  memory::Choice c = memory::choose_cheapest(items, need);
  ASSERT_TRUE(c.met);
  EXPECT_GE(c.saved, need);
}

TEST(Budget, ParsesFractionsAndSizesAndQuotesWhatItCannot) {
  EXPECT_DOUBLE_EQ(memory::parse_budget("0.3").stash_fraction, 0.3);
  EXPECT_EQ(memory::parse_budget("6GiB").peak_bytes, int64_t(6) << 30);
  EXPECT_EQ(memory::parse_budget("512MiB").peak_bytes, int64_t(512) << 20);
  EXPECT_EQ(memory::parse_budget("1000B").peak_bytes, 1000);
  EXPECT_TRUE(memory::parse_budget("").empty());
  for (const char* bad : {"1.5", "-0.2", "6 GiB", "6GB", "half"}) {
    try {
      memory::parse_budget(bad);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      std::string quoted = "'";
      quoted.append(bad).append("'");
      EXPECT_NE(std::string(e.what()).find(quoted), std::string::npos) << e.what();
    }
  }
}
