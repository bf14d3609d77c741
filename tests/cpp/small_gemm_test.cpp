// small_gemm against a double-precision reference: dense, triangular (causal) A and B, zero rows and columns,
// and the products it must not skip (an infinity or a NaN opposite a zero gives NaN, as BLAS would).
#include "kernels/cpu/small_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace onnxtrain;

namespace {

enum Pattern { kDense, kLower, kUpper, kZeroRows };

template <typename T>
std::vector<T> matrix(int64_t rows, int64_t cols, Pattern p, int seed) {
  std::vector<T> x(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      bool zero = (p == kLower && j > i) || (p == kUpper && j < i) || (p == kZeroRows && i % 5 == 2);
      x[size_t(i * cols + j)] = zero ? T(0) : T(((i * 31 + j * 17 + seed) % 41) - 20) / T(8);
    }
  return x;
}

template <typename T>
std::vector<double> reference(int64_t m, int64_t n, int64_t k, const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<double> c(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        c[size_t(i * n + j)] += double(a[size_t(i * k + p)]) * double(b[size_t(p * n + j)]);
  return c;
}

template <typename T>
std::vector<T> transposed(const std::vector<T>& x, int64_t rows, int64_t cols) {
  std::vector<T> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[size_t(j * rows + i)] = x[size_t(i * cols + j)];
  return t;
}

// op(A) and op(B) with the patterns, stored transposed where ta / tb say.
template <typename T>
void check(int64_t m, int64_t n, int64_t k, Pattern pa, Pattern pb, bool ta = false, bool tb = false) {
  auto a = matrix<T>(m, k, pa, 1), b = matrix<T>(k, n, pb, 2);
  std::vector<T> c(size_t(m * n), T(7));  // stale values: every element must be written
  kernels::small_gemm<T>(ta, tb, m, n, k, (ta ? transposed(a, m, k) : a).data(), (tb ? transposed(b, k, n) : b).data(),
                         c.data());
  auto want = reference(m, n, k, a, b);
  for (size_t i = 0; i < c.size(); ++i)
    ASSERT_NEAR(double(c[i]), want[i], 1e-4 * (1 + std::abs(want[i])))
        << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb << " patterns " << pa << pb << " at " << i;
}

}  // namespace

TEST(SmallGemm, MatchesTheReferenceForEachZeroPattern) {
  for (Pattern pa : {kDense, kLower, kUpper, kZeroRows})
    for (Pattern pb : {kDense, kLower, kUpper, kZeroRows}) {
      check<float>(128, 64, 128, pa, pb);
      check<float>(128, 128, 128, pa, pb);
      check<float>(37, 45, 53, pa, pb);  // no multiple of a tile or a vector
      check<double>(70, 33, 70, pa, pb);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          check<float>(128, 64, 128, pa, pb, ta, tb);
          check<float>(37, 45, 53, pa, pb, ta, tb);
        }
    }
  check<float>(1, 1, 1, kDense, kDense);
}

TEST(SmallGemm, ANonFiniteValueOppositeAZeroStillGivesNaN) {
  const int64_t m = 64, n = 16, k = 64;
  auto a = matrix<float>(m, k, kLower, 1), b = matrix<float>(k, n, kDense, 2);
  b[size_t((k - 1) * n + 3)] = INFINITY;  // row k-1 of B meets only zeros of A, but in row k-1 of A
  std::vector<float> c(size_t(m * n));
  kernels::small_gemm<float>(false, false, m, n, k, a.data(), b.data(), c.data());
  for (int64_t i = 0; i < m - 1; ++i) EXPECT_TRUE(std::isnan(c[size_t(i * n + 3)])) << "row " << i;  // 0 * inf
  EXPECT_TRUE(std::isinf(c[size_t((m - 1) * n + 3)]));
  // The zeros in B (columns past 32 start further down), a NaN in A's first column meeting them.
  auto a2 = matrix<float>(m, k, kDense, 1), b2 = matrix<float>(k, m, kLower, 2);
  a2[0] = NAN;
  std::vector<float> c2(size_t(m * m));
  kernels::small_gemm<float>(false, false, m, m, k, a2.data(), b2.data(), c2.data());
  for (int64_t j = 0; j < m; ++j) EXPECT_TRUE(std::isnan(c2[size_t(j)])) << "column " << j;
  EXPECT_FALSE(std::isnan(c2[size_t(m + 40)]));
}
