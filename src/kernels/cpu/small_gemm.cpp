#include "kernels/cpu/small_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace onnxtrain::kernels {
namespace {

constexpr int64_t kTileRows = 32, kTileCols = 32;
constexpr int64_t kSmallWork = int64_t(1) << 19;  // m n k of a tile at most (measured with OpenBLAS)

struct Band {
  int64_t lo, hi;  // [lo, hi): where the tile's products can be non-zero
};

// Scans over zeros, 8 floats at a time (scalar for other types): the first non-zero of x[from, to) (to if none)
// and one past the last non-zero of x[from, to) (from if none).
template <typename T>
int64_t skip_zeros_up(const T* x, int64_t from, int64_t to) {
  if constexpr (std::is_same_v<T, float>)
    for (; from + 8 <= to; from += 8)
      if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + from), _mm256_setzero_ps(), _CMP_NEQ_UQ))) break;
  while (from < to && x[from] == T(0)) ++from;
  return from;
}

template <typename T>
int64_t skip_zeros_down(const T* x, int64_t from, int64_t to) {
  if constexpr (std::is_same_v<T, float>)
    for (; to - 8 >= from; to -= 8)
      if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + to - 8), _mm256_setzero_ps(), _CMP_NEQ_UQ))) break;
  while (to > from && x[to - 1] == T(0)) --to;
  return to;
}

// Whether every x[i] is finite: x * 0 is 0 unless x is an infinity or a NaN.
template <typename T>
bool all_finite(const T* x, int64_t count) {
  int64_t i = 0;
  T acc = 0;
  if constexpr (std::is_same_v<T, float>) {
    __m256 v = _mm256_setzero_ps();
    for (; i + 8 <= count; i += 8) v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps()));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (float l : lanes) acc += l;
  }
  for (; i < count; ++i) acc += x[i] * T(0);
  return acc == T(0);
}

// For each block of `rows` rows of the row-major (m, k) matrix a, the columns holding its non-zeros.
template <typename T>
std::vector<Band> row_bands(const T* a, int64_t m, int64_t k, int64_t rows) {
  std::vector<Band> bands;
  for (int64_t r = 0; r < m; r += rows) {
    Band band{k, 0};
    for (int64_t i = r; i < std::min(m, r + rows); ++i) {
      const T* row = a + i * k;
      int64_t lo = skip_zeros_up(row, 0, band.lo), hi = skip_zeros_down(row, std::max(lo, band.hi), k);
      band.lo = std::min(band.lo, lo);
      if (hi > lo) band.hi = std::max(band.hi, hi);  // (hi == lo: no non-zero past lo, or lo only capped)
    }
    bands.push_back(band);
  }
  return bands;
}

// For each block of `cols` columns of the row-major (k, n) matrix b, the rows holding its non-zeros.
template <typename T>
std::vector<Band> col_bands(const T* b, int64_t k, int64_t n, int64_t cols) {
  std::vector<Band> bands;
  for (int64_t c0 = 0; c0 < n; c0 += cols) {
    int64_t c1 = std::min(n, c0 + cols);
    auto zero_row = [&](int64_t i) { return skip_zeros_up(b + i * n, c0, c1) == c1; };
    Band band{0, k};
    while (band.lo < k && zero_row(band.lo)) ++band.lo;
    while (band.hi > band.lo && zero_row(band.hi - 1)) --band.hi;
    bands.push_back(band);
  }
  return bands;
}

bool narrower(const std::vector<Band>& bands, int64_t k) {
  return std::any_of(bands.begin(), bands.end(), [k](const Band& b) { return b.lo > 0 || b.hi < k; });
}

}  // namespace

template <typename T>
void small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c) {
  int64_t rows = !ta && tb ? kTileRows / 2 : kTileRows;  // (A B^T runs fastest in 16-row tiles here)
  while (rows > 8 && rows * n * k > kSmallWork) rows /= 2;
  // Bands of op(A)'s row blocks and op(B)'s column blocks; a transposed operand's are its stored columns' / rows'.
  std::vector<Band> ra = ta ? col_bands(a, k, m, rows) : row_bands(a, m, k, rows);
  std::vector<Band> cb = tb ? row_bands(b, n, k, kTileCols) : col_bands(b, k, n, kTileCols);
  bool trim_a = narrower(ra, k), trim_b = narrower(cb, k);
  // Skipping zeros of A skips products with rows of B, and the other way round: those must be finite.
  if ((trim_a && !all_finite(b, k * n)) || (trim_b && !all_finite(a, m * k))) trim_a = trim_b = false;
  // No zeros to skip: one call (oneDNN's GEMM runs tiles of 32 rows about 1.5x slower than one call, measured).
  if (!trim_a && !trim_b) return gemm<T>(ta, tb, m, n, k, T(1), a, ta ? m : k, b, tb ? k : n, T(0), c, n);
  int64_t cols = trim_b ? kTileCols : n;
  for (size_t r = 0; r < ra.size(); ++r) {
    int64_t r0 = int64_t(r) * rows, mr = std::min(rows, m - r0);
    for (int64_t c0 = 0; c0 < n; c0 += cols) {
      int64_t nc = std::min(cols, n - c0), lo = 0, hi = k;
      if (trim_a) lo = std::max(lo, ra[r].lo), hi = std::min(hi, ra[r].hi);
      if (trim_b) lo = std::max(lo, cb[size_t(c0 / kTileCols)].lo), hi = std::min(hi, cb[size_t(c0 / kTileCols)].hi);
      if (lo >= hi) {
        for (int64_t i = 0; i < mr; ++i) std::fill(c + (r0 + i) * n + c0, c + (r0 + i) * n + c0 + nc, T(0));
        continue;
      }
      const T* at = ta ? a + lo * m + r0 : a + r0 * k + lo;  // op(A)[r0.., lo..]
      const T* bt = tb ? b + c0 * k + lo : b + lo * n + c0;  // op(B)[lo.., c0..]
      gemm<T>(ta, tb, mr, nc, hi - lo, T(1), at, ta ? m : k, bt, tb ? k : n, T(0), c + r0 * n + c0, n);
    }
  }
}

template void small_gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, const float*, float*);
template void small_gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, const double*, double*);

}  // namespace onnxtrain::kernels
