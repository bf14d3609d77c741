#include "core/dim.h"

#include <gtest/gtest.h>

using onnxtrain::Dim;

TEST(Dim, ProductsAreCanonical) {
  Dim a = Dim::symbol("input_ids_dim0"), b = Dim::symbol("input_ids_dim1");
  EXPECT_EQ(a * b, b * a);
  EXPECT_EQ((a * b).str(), "input_ids_dim0*input_ids_dim1");
  EXPECT_EQ(a + a, Dim(2) * a);
  EXPECT_EQ((a + Dim(3)) - Dim(3), a);
  EXPECT_NE(a, b);
}

TEST(Dim, DivisionIsExactWhenItCanBe) {
  Dim b = Dim::symbol("B"), t = Dim::symbol("T");
  EXPECT_EQ(Dim::floor_div(b * t * Dim(768), Dim(12) * b * t), Dim(64));
  EXPECT_EQ(Dim::floor_div(Dim(4) * b, Dim(2)), Dim(2) * b);
  Dim q = Dim::floor_div(b, Dim(3));  // opaque, still evaluates
  EXPECT_EQ(q.eval({{"B", 10}}).value(), 3);
}

TEST(Dim, EvaluatesAndReportsUnbound) {
  Dim e = Dim::symbol("B") * Dim::symbol("T") + Dim(1);
  EXPECT_EQ(e.eval({{"B", 2}, {"T", 5}}).value(), 11);
  EXPECT_FALSE(e.eval({{"B", 2}}).has_value());
  Dim m = Dim::min(Dim::symbol("T"), Dim(8));
  EXPECT_EQ(m.eval({{"T", 5}}).value(), 5);
  EXPECT_EQ(m.eval({{"T", 50}}).value(), 8);
}

TEST(Dim, MinMaxUseThatSizesAreNonNegative) {
  Dim t = Dim::symbol("T");
  EXPECT_EQ(Dim::max(Dim(0), t), t);
  EXPECT_EQ(Dim::max(t + Dim(2), t), t + Dim(2));
  EXPECT_EQ(Dim::min(t, t * Dim(2)), t);
  EXPECT_FALSE(Dim::max(t, Dim(8)).is_const());
}
