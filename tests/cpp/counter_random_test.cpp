// Dropout's counter-based draw (kernels/counter_random.h), by blocks of 64 elements: a run drawn a key a block is
// the draw element by element wherever it starts and ends; the kept fraction is 1 - ratio; and neither neighbours,
// the places 8 apart (the two halves of one draw), the same place of consecutive blocks, nor consecutive seeds draw
// alike more often than independent draws would.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/counter_random.h"
#include "kernels/cpu/dropout_draws.h"

namespace onnxtrain::kernels {
namespace {

TEST(DropoutDraw, ARunDrawnABlockAtATimeIsTheDrawOfEachElement) {
  const uint32_t threshold = dropout_threshold(0.5);
  for (uint64_t start : {0ull, 1ull, 63ull, 64ull, 100ull, (1ull << 33) - 5}) {
    for (int64_t n : {1, 63, 64, 65, 300}) {
      bool buffer[300];
      dropout_keeps_run(7, start, n, threshold, buffer);
      for (int64_t k = 0; k < n; ++k)
        EXPECT_EQ(buffer[k], dropout_keeps(7, start + uint64_t(k), threshold)) << start << " + " << k;
    }
  }
}

// The host's draw (sixteen places at a time with AVX-512), on this CPU and on one without AVX-512.
TEST(DropoutDraw, TheHostsDrawIsTheDrawOfEachElement) {
  for (bool avx512 : {true, false}) {
    cpu::restrict_features(avx512, avx512);
    for (double ratio : {0.1, 0.5, 0.9})
      for (uint64_t start : {0ull, 5ull, 16ull, 56ull, 64ull, 1000ull, (1ull << 33) - 5})
        for (int64_t n : {1, 15, 16, 17, 64, 300}) {
          bool buffer[300];
          const uint32_t threshold = dropout_threshold(ratio);
          dropout_keeps_draw(11, start, n, threshold, buffer);
          for (int64_t k = 0; k < n; ++k)
            ASSERT_EQ(buffer[k], dropout_keeps(11, start + uint64_t(k), threshold))
                << cpu::features().str() << ": " << start << " + " << k << " of " << n;
        }
  }
  cpu::restrict_features(true, true);
}

// Over n draws, the fraction kept and the fraction of pairs (i, i + lag) both kept, within 5 standard deviations of
// independent draws' (sample sizes of a million: 0.25% and less).
void expect_independent(double ratio, uint64_t lag, uint64_t seed_step) {
  const uint32_t threshold = dropout_threshold(ratio);
  const int64_t n = 1 << 20;
  int64_t kept = 0, both = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool a = dropout_keeps(11, uint64_t(i), threshold);
    const bool b = dropout_keeps(11 + seed_step, uint64_t(i) + lag, threshold);
    kept += a, both += a && b;
  }
  const double p = 1 - ratio, pp = p * p;
  EXPECT_NEAR(double(kept) / double(n), p, 5 * std::sqrt(p * (1 - p) / double(n))) << ratio;
  EXPECT_NEAR(double(both) / double(n), pp, 5 * std::sqrt(pp * (1 - pp) / double(n)))
      << "ratio " << ratio << ", lag " << lag << ", seed step " << seed_step;
}

TEST(DropoutDraw, KeepsOneMinusTheRatioIndependentlyOfNeighboursBlocksAndSeeds) {
  for (double ratio : {0.1, 0.5, 0.9}) {
    expect_independent(ratio, 1, 0);   // neighbours
    expect_independent(ratio, 8, 0);   // the place that shares a draw
    expect_independent(ratio, 64, 0);  // the same place of the next block
    expect_independent(ratio, 0, 1);   // the next seed
  }
}

}  // namespace
}  // namespace onnxtrain::kernels
