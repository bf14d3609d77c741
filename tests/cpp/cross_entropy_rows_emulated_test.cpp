// The cross-entropy's row kernels (kernels/cuda/cross_entropy_rows.cuh: the fused head's and SoftmaxCrossEntropyLoss's)
// run on the host through the warp emulation, against float64 references: each row's log-sum-exp and loss, the
// totals, the logits written on the way, and the scores' gradient (zeros in the padding). Scores in bf16 (a bf16
// head's) and in float32; rows of 1,003 classes padded to 1,008 (16-byte reads) and unpadded (one score at a time);
// ignored targets; the bf16 gradient written in the scores' place; and random cases of these (random_cases.h).
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#include "kernels/cuda/cross_entropy_rows.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "random_cases.h"

namespace onnxtrain::kernels::cuda {
namespace {

struct Case {
  int64_t ld;                   // the rows' stride: `classes`, or padded to a multiple of 8
  std::vector<int64_t> target;  // a row's target (-100 ignored)
  int64_t classes = 1003;
  unsigned grid_x = 2, grid_y = 3;  // grad_kernel's grid
};

template <typename S>
std::vector<S> scores(const Case& c) {
  const int64_t rows = int64_t(c.target.size()), ld = c.ld;
  std::vector<S> s(size_t(rows * ld));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < ld; ++j)
      s[size_t(r * ld + j)] = from_float<S>(j >= c.classes ? 0.f : float((r * 7919 + j * 104729) % 1001) / 97.f - 5.f);
  return s;
}

CrossEntropy rows_of(const Case& c) {
  CrossEntropy e;
  e.n = int64_t(c.target.size()), e.c = c.classes, e.ld = c.ld;
  e.target = c.target.data();
  e.has_ignore = true, e.ignore = -100;
  return e;
}

// Row r's log-sum-exp of the scores as they are (their 16-bit values, for 16-bit scores), in float64.
template <typename S>
double lse_of(const std::vector<S>& s, const Case& c, int64_t r) {
  const int64_t ld = c.ld;
  double top = -INFINITY, sum = 0;
  for (int64_t j = 0; j < c.classes; ++j) top = std::max(top, double(to_float(s[size_t(r * ld + j)])));
  for (int64_t j = 0; j < c.classes; ++j) sum += std::exp(double(to_float(s[size_t(r * ld + j)])) - top);
  return top + std::log(sum);
}

template <typename S, typename T>
void check_rows(const Case& c) {
  const std::vector<S> s = scores<S>(c);
  const CrossEntropy e = rows_of(c);
  const int64_t rows = e.n, classes = c.classes;
  std::vector<float> lse(rows), losses(rows);
  std::vector<T> logits(size_t(rows * classes), from_float<T>(77.f));
  std::vector<double> totals(2, 0.0);
  testing::emulate(unsigned(rows), kThreads, [&] {
    rows_kernel<S, T>(e, s.data(), lse.data(), losses.data(), totals.data(), logits.data());
  });
  double total = 0, count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double want = lse_of(s, c, r);
    EXPECT_NEAR(lse[size_t(r)], want, 1e-5 * std::abs(want)) << "row " << r << ", ld " << c.ld;
    const int64_t t = c.target[size_t(r)];
    const double loss = t == -100 ? 0.0 : want - to_float(s[size_t(r * c.ld + t)]);
    EXPECT_NEAR(losses[size_t(r)], loss, 1e-5 * std::max(1.0, std::abs(loss))) << "row " << r;
    total += loss, count += t == -100 ? 0 : 1;
    for (int64_t j = 0; j < classes; ++j)
      ASSERT_EQ(to_float(logits[size_t(r * classes + j)]), to_float(from_float<T>(to_float(s[size_t(r * c.ld + j)]))))
          << "row " << r << ", class " << j;
  }
  EXPECT_NEAR(totals[0], total, 1e-5 * std::abs(total));
  EXPECT_EQ(totals[1], count);
}

// grad_kernel over a grid as the launch gives it (at most a few blocks of columns: the grid's loops take the rest),
// its output g (the scores themselves where `in_place`).
template <typename S, typename T, int V>
void check_gradient(const Case& c, bool in_place) {
  std::vector<S> s = scores<S>(c);
  const std::vector<S> kept = s;
  const CrossEntropy e = rows_of(c);
  const int64_t rows = e.n, classes = c.classes;
  std::vector<float> lse(rows), dloss{0.75f};
  for (int64_t r = 0; r < rows; ++r) lse[size_t(r)] = float(lse_of(s, c, r));
  const std::vector<double> totals{0.0, 4.0};  // (a mean over 4 targets)
  std::vector<T> own(size_t(rows * c.ld), from_float<T>(77.f));
  T* g = nullptr;
  if constexpr (std::is_same_v<S, T>) g = in_place ? s.data() : own.data();
  if (!g) g = own.data();
  testing::emulate(EmulatedIndex{c.grid_x, c.grid_y, 1}, kThreads, [&] {
    grad_kernel<S, T, V>(e, s.data(), lse.data(), dloss.data(), false, true, totals.data(), g);
  });
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = c.target[size_t(r)];
    const double w = t == -100 ? 0.0 : 0.75 / 4.0;
    for (int64_t j = 0; j < c.ld; ++j) {
      const double want = j >= classes ? 0.0
                                        : w * (std::exp(double(to_float(kept[size_t(r * c.ld + j)])) - lse[size_t(r)]) -
                                               (j == t ? 1.0 : 0.0));
      const double got = to_float(g[size_t(r * c.ld + j)]);
      const double ulp = std::is_same_v<T, float> ? 4e-6 : 1.0 / 128;  // (a bf16 gradient: rounded once)
      ASSERT_NEAR(got, want, ulp * std::abs(want) + 1e-7) << "row " << r << ", class " << j << ", ld " << c.ld;
    }
  }
}

const Case kPadded{1008, {5, -100, 1002, 0, 17}}, kUnpadded{1003, {5, -100, 1002, 0, 17}};

TEST(CrossEntropyRows, EachRowsLogSumExpLossAndLogitsFromBf16Scores) {
  check_rows<__nv_bfloat16, __nv_bfloat16>(kPadded);
  check_rows<__nv_bfloat16, __nv_bfloat16>(kUnpadded);
}

TEST(CrossEntropyRows, EachRowsLogSumExpLossAndLogitsFromFloat32Scores) {
  check_rows<float, __nv_bfloat16>(kPadded);
  check_rows<float, float>(kUnpadded);
}

TEST(CrossEntropyRows, TheGradientEightColumnsAThreadInTheScoresPlaceOrOneAtATime) {
  check_gradient<__nv_bfloat16, __nv_bfloat16, 8>(kPadded, true);
  check_gradient<__nv_bfloat16, __nv_bfloat16, 1>(kUnpadded, false);
  check_gradient<float, float, 8>(kPadded, true);
  check_gradient<float, __nv_bfloat16, 8>(kPadded, false);
  check_gradient<float, float, 1>(kUnpadded, false);
}

// Random cases (random_cases.h): 1 to 12 rows of 1 to 5,000 classes (GPT-2's 50,257 sometimes), padded to a multiple
// of 8 or not, targets anywhere and ignored, the gradient's grid of 1 to 4 by 1 to 4 blocks; each pair of dtypes.
TEST(CrossEntropyRows, RandomCasesComputeAsInFloat64) {
  testing::for_random_seeds(6, [](testing::Draws& d) {
    Case c;
    c.classes = d.below(8) ? 1 + d.below(5000) : 50257;
    const bool padded = d.below(2);
    c.ld = padded ? (c.classes + 7) / 8 * 8 : c.classes;
    c.target.resize(size_t(1 + d.below(12)));
    for (int64_t& t : c.target) t = d.below(4) ? d.below(c.classes) : -100;
    c.grid_x = unsigned(1 + d.below(4)), c.grid_y = unsigned(1 + d.below(4));
    SCOPED_TRACE(std::to_string(c.target.size()) + " rows of " + std::to_string(c.classes) + " classes, ld " +
                 std::to_string(c.ld) + ", grid " + std::to_string(c.grid_x) + " x " + std::to_string(c.grid_y));
    check_rows<__nv_bfloat16, __nv_bfloat16>(c);
    check_rows<float, __nv_bfloat16>(c);
    check_rows<float, float>(c);
    check_gradient<__nv_bfloat16, __nv_bfloat16, 1>(c, d.below(2));
    check_gradient<float, __nv_bfloat16, 1>(c, false);
    check_gradient<float, float, 1>(c, d.below(2));
    if (padded) {  // (16 bytes a read)
      check_gradient<__nv_bfloat16, __nv_bfloat16, 8>(c, d.below(2));
      check_gradient<float, __nv_bfloat16, 8>(c, false);
      check_gradient<float, float, 8>(c, d.below(2));
    }
  });
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
