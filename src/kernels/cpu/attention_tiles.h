// What the host's com.onnxtrain.FlashAttention kernels (flash_attention.cpp in float32 and float64,
// flash_attention_bf16.cpp in bfloat16) share about a tile of scores: a call's scalars and mask, the band of keys a
// tile of query rows reads, the scores' bias and mask applied, exp, and the dropout draw. T is the type the scores
// are computed in, E the type the operands, the scalars and the bias are stored in (T, or bfloat16 under float).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/attention_geometry.h"
#include "kernels/counter_random.h"
#include "kernels/cpu/attention_band.h"
#include "kernels/cpu/dropout_draws.h"
#include "kernels/cpu/vector_math.h"

namespace onnxtrain::kernels::attention {

// A fill or bias at or below this vanishes under exp next to any score a row can hold: its keys may be skipped.
constexpr double kVanishes = -1e30;

// The scalars and the mask of one call.
template <typename T, typename E = T>
struct Params {
  T scale = 1, fill = 0;
  const bool* cond = nullptr;
  int64_t row_stride = 0, col_stride = 0;  // the mask's, over a pair's (tq, tk) scores
  const E* bias = nullptr;
  int64_t bias_row = 0, bias_col = 0;
  bool fill_vanishes = false;     // exp(fill - m) is 0 for any score m a row can hold: masked keys may be skipped
  bool zero_masked_rows = false;  // a fully masked row gives zeros (LSE +inf), not NaN
  bool dropout = false;
  uint32_t threshold = 0;
  T keep_scale = 1;
  uint64_t seed = 0;
};

// Input i, one number of any float dtype (a bfloat16 node's scalars may have stayed float32).
template <typename T>
T scalar(const KernelCtx& c, size_t i, const char* what) {
  const Tensor& t = c.in(i);
  if (t.numel() != 1) c.fail(std::string(what) + " must be a scalar");
  if (t.dtype() == DType::kBFloat16) return T(t.data<BFloat16>()[0]);
  if (t.dtype() == DType::kFloat32) return T(t.data<float>()[0]);
  if (t.dtype() != DType::kFloat64) c.fail(std::string(what) + " must be a float, not " + dtype_name(t.dtype()));
  return T(t.data<double>()[0]);
}

// The call's parameters: its scalars from input `first_scalar` on (scale, cond, fill, ratio, training, bias).
template <typename T, typename E = T>
Params<T, E> params(const KernelCtx& c, const AttentionGeometry& g, size_t first_scalar) {
  const size_t scale = first_scalar, cond = scale + 1, fill = scale + 2, ratio = scale + 3, training = scale + 4,
               bias = scale + 5;
  Params<T, E> p;
  p.zero_masked_rows = c.node.attr_int("zero_masked_rows", 0) != 0;
  if (c.has(scale)) p.scale = scalar<T>(c, scale, "scale");
  if (c.has(bias)) {
    const size_t q = first_scalar == 3 ? 0 : 1;  // (the forward's inputs, or the gradient's)
    if (c.in(bias).dtype() != c.in(q).dtype()) c.fail("bias must have Q's dtype");
    p.bias = c.in(bias).data<E>();
    const size_t r = g.bias_strides.size();
    p.bias_row = g.bias_strides[r - 2];
    p.bias_col = g.bias_strides[r - 1];
  }
  if (c.has(cond) != c.has(fill)) c.fail("cond and fill come together");
  if (c.has(cond)) {
    p.cond = c.in(cond).data<bool>();
    p.fill = scalar<T>(c, fill, "fill");
    const size_t r = g.cond_strides.size();
    p.row_stride = g.cond_strides[r - 2];
    p.col_stride = g.cond_strides[r - 1];
    p.fill_vanishes = p.fill <= T(kVanishes);
  }
  if (const double rate = attention_dropout_rate(c, ratio, training); rate > 0) {
    p.dropout = true;
    p.threshold = dropout_threshold(rate);
    p.keep_scale = T(1.0 / (1.0 - rate));
    p.seed = c.seed;
  }
  return p;
}

// Eight bias values as float32 (float32 or bfloat16 ones).
inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const BFloat16* x) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
template <typename E>
constexpr bool kEightAtOnce = std::is_same_v<E, float> || std::is_same_v<E, BFloat16>;

// The first of bias row[from, to) that does not vanish under exp (above kVanishes, or NaN), else to; and one past
// the last, else from. Eight values a compare: a causal bias's rows are mostly vanishing keys, each row scanned
// once a tile of every head.
template <typename E>
int64_t first_kept(const E* row, int64_t from, int64_t to) {
  if constexpr (kEightAtOnce<E>)
    for (const __m256 bound = _mm256_set1_ps(float(kVanishes)); from + 8 <= to; from += 8)
      if (_mm256_movemask_ps(_mm256_cmp_ps(load8(row + from), bound, _CMP_NLE_UQ))) break;
  while (from < to && double(row[from]) <= kVanishes) ++from;
  return from;
}
template <typename E>
int64_t last_kept(const E* row, int64_t from, int64_t to) {
  if constexpr (kEightAtOnce<E>)
    for (const __m256 bound = _mm256_set1_ps(float(kVanishes)); to - 8 >= from; to -= 8)
      if (_mm256_movemask_ps(_mm256_cmp_ps(load8(row + to - 8), bound, _CMP_NLE_UQ))) break;
  while (to > from && double(row[to - 1]) <= kVanishes) --to;
  return to;
}

// row[j] += bias[j * col] for j < w; eight at a time where both are float32 (the bias bfloat16 or float32) and the
// bias's columns are consecutive.
template <typename T, typename E>
void add_bias(T* row, const E* bias, int64_t col, int64_t w) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float> && kEightAtOnce<E>)
    if (col == 1)
      for (; j + 8 <= w; j += 8) _mm256_storeu_ps(row + j, _mm256_add_ps(_mm256_loadu_ps(row + j), load8(bias + j)));
  for (; j < w; ++j) row[j] += T(bias[j * col]);
}

// The keys the tile of rows [r0, r1) of one pair reads: all but those every row masks, when skipping is exact (a
// mask whose fill vanishes under exp, or a bias of such values where there is no mask).
template <typename T, typename E>
AttentionBand band_of(const Params<T, E>& p, const bool* pair_cond, const E* pair_bias, int64_t r0, int64_t r1,
                      int64_t tk) {
  const AttentionBand all{0, tk, true};
  if (p.cond) {
    if (pair_bias || !p.fill_vanishes || p.col_stride != 1) return all;
    AttentionBand b = open_band(pair_cond, p.row_stride, r0, r1, tk);
    return b.every_row_open ? b : all;  // (a fully masked row softmaxes every key)
  }
  if (!pair_bias || p.bias_col != 1) return all;
  AttentionBand b{tk, 0, true};
  for (int64_t r = r0; r < (p.bias_row ? r1 : r0 + 1); ++r) {
    const E* row = pair_bias + r * p.bias_row;
    const int64_t lo = first_kept(row, 0, tk);
    if (lo == tk) return all;
    b.lo = std::min(b.lo, lo), b.hi = std::max(b.hi, last_kept(row, std::max(lo, b.hi), tk));
  }
  return b;
}

// The band of keys each tile of `rows` query rows reads, of every pair: worked out once for the pairs that share a
// mask and a bias (the heads of a batch under a broadcast mask), not once for each (a band is a scan of its rows' mask
// or bias).
template <typename T, typename E>
class Bands {
 public:
  Bands(const Params<T, E>& p, const AttentionGeometry& g, int64_t rows) : rows_(rows), of_(size_t(g.pairs)) {
    std::map<std::pair<int64_t, int64_t>, size_t> seen;  // (the mask's offset, the bias's) -> bands_
    for (int64_t pair = 0; pair < g.pairs; ++pair) {
      const int64_t c = p.cond ? g.offset(g.cond_strides, pair) : -1, b = p.bias ? g.offset(g.bias_strides, pair) : -1;
      auto [it, fresh] = seen.emplace(std::make_pair(c, b), bands_.size());
      of_[size_t(pair)] = it->second;
      if (!fresh) continue;
      std::vector<AttentionBand>& tiles = bands_.emplace_back();
      for (int64_t r0 = 0; r0 < g.tq; r0 += rows)
        tiles.push_back(band_of(p, p.cond ? p.cond + c : nullptr, p.bias ? p.bias + b : nullptr, r0,
                                std::min(r0 + rows, g.tq), g.tk));
    }
  }
  // The band of the tile of `pair`'s rows that starts at r0.
  const AttentionBand& at(int64_t pair, int64_t r0) const { return bands_[of_[size_t(pair)]][size_t(r0 / rows_)]; }

 private:
  int64_t rows_;
  std::vector<size_t> of_;
  std::vector<std::vector<AttentionBand>> bands_;
};

// The scaled scores s (mr, w) of rows [r0, r0 + mr) and keys [j0, j0 + w) of one pair, their product made: biased
// and masked.
template <typename T, typename E>
void bias_and_mask(const Params<T, E>& p, const bool* pair_cond, const E* pair_bias, int64_t r0, int64_t mr,
                   int64_t j0, int64_t w, T* s) {
  for (int64_t r = 0; r < mr; ++r) {
    T* row = s + r * w;
    if (pair_bias) {
      add_bias(row, pair_bias + (r0 + r) * p.bias_row + j0 * p.bias_col, p.bias_col, w);
    }
    if (!p.cond) continue;
    const bool* cr = pair_cond + (r0 + r) * p.row_stride + j0 * p.col_stride;
    if constexpr (std::is_same_v<T, float>) {
      if (p.col_stride == 1) {
        masked_scale_f32(row, cr, 1.f, p.fill, row, w);
        continue;
      }
    }
    for (int64_t j = 0; j < w; ++j) row[j] = cr[j * p.col_stride] ? p.fill : row[j];
  }
}

// x = exp(x - shift), vectorized for float32.
template <typename T>
void exp_shifted(T* x, T shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] -= shift;
  if constexpr (std::is_same_v<T, float>) {
    exp_f32(x, x, n);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
  }
}

// keep[j] for keys [j0, j0 + w) of score row `row` (flat over all pairs' scores, as a Dropout after the softmax
// would number them).
template <typename T, typename E>
void dropout_row(const Params<T, E>& p, uint64_t row, int64_t tk, int64_t j0, int64_t w, bool* keep) {
  dropout_keeps_draw(p.seed, row * uint64_t(tk) + uint64_t(j0), w, p.threshold, keep);
}

// One key block's scores s (mr, w) of rows [r0, r0 + mr) of pair `pair` into the online softmax: each row's running
// maximum m and sum l grow, s becomes the row's probabilities so far (dropped where dropout drops them, unscaled by
// l), and the row's output so far, y (mr rows ldy apart, float), is rescaled to the new maximum.
template <typename T, typename E>
void online_softmax(const Params<T, E>& p, const AttentionGeometry& g, int64_t pair, int64_t r0, int64_t mr,
                    int64_t j0, int64_t w, T* s, T* m, T* l, T* y, int64_t ldy, bool* keep) {
  for (int64_t r = 0; r < mr; ++r) {
    T* row = s + r * w;
    const T mn = std::max(m[r], row_max(row, w));
    if (mn == -std::numeric_limits<T>::infinity()) {  // every score so far is -inf: nothing to add yet
      std::fill(row, row + w, T(0));
      continue;
    }
    const T alpha = std::exp(m[r] - mn);
    exp_shifted(row, mn, w);
    l[r] = l[r] * alpha + T(row_sum(row, w));
    m[r] = mn;
    if (p.dropout) {
      dropout_row(p, uint64_t(pair * g.tq + r0 + r), g.tk, j0, w, keep);
      for (int64_t j = 0; j < w; ++j) row[j] = keep[j] ? row[j] * p.keep_scale : T(0);
    }
    if (alpha != T(1))
      for (int64_t c = 0; c < g.dv; ++c) y[r * ldy + c] *= alpha;
  }
}

// The rows' outputs y (mr rows ldy apart) divided by their sums l, and their log-sum-exps into lse; a fully masked
// row (l = 0) gives NaN, as Softmax does, or zeros.
template <typename T>
void finish_rows(bool zero_masked_rows, int64_t mr, int64_t dv, const T* m, const T* l, T* y, int64_t ldy, T* lse) {
  for (int64_t r = 0; r < mr; ++r) {
    T* yr = y + r * ldy;
    if (l[r] == T(0)) {
      std::fill(yr, yr + dv, zero_masked_rows ? T(0) : std::numeric_limits<T>::quiet_NaN());
      lse[r] = zero_masked_rows ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    const T inv = T(1) / l[r];
    for (int64_t c = 0; c < dv; ++c) yr[c] *= inv;
    lse[r] = m[r] + std::log(l[r]);
  }
}

// The probabilities pp (mr, w) of a tile from its scores (in place) and the rows' log-sum-exps lse, and where
// dropout drops them, the dropped ones pd and keep (both mr by w).
template <typename T, typename E>
void probabilities(const Params<T, E>& p, const AttentionGeometry& g, int64_t pair, int64_t r0, int64_t mr,
                   int64_t j0, int64_t w, const T* lse, T* pp, T* pd, bool* keep) {
  for (int64_t r = 0; r < mr; ++r) {
    T* row = pp + r * w;
    exp_shifted(row, lse[r], w);
    if (!p.dropout) continue;
    bool* kr = keep + r * w;
    dropout_row(p, uint64_t(pair * g.tq + r0 + r), g.tk, j0, w, kr);
    for (int64_t j = 0; j < w; ++j) pd[r * w + j] = kr[j] ? row[j] * p.keep_scale : T(0);
  }
}

// dS (mr, w) = P (dP - D) scale in place of dP (ds), 0 where masked (the fill is a constant): pp the tile's
// probabilities, dots D of its rows (rowsum(dY Y)), keep its dropout draw.
template <typename T, typename E>
void score_gradients(const Params<T, E>& p, const bool* pair_cond, int64_t r0, int64_t mr, int64_t j0, int64_t w,
                     const T* pp, const T* dots, const bool* keep, T* ds) {
  for (int64_t r = 0; r < mr; ++r) {
    const bool* cr = pair_cond ? pair_cond + (r0 + r) * p.row_stride + j0 * p.col_stride : nullptr;
    const T dr = dots[r];
    T* dsr = ds + r * w;
    const T* pr = pp + r * w;
    if (p.dropout) {
      const bool* kr = keep + r * w;
      for (int64_t j = 0; j < w; ++j) dsr[j] = kr[j] ? dsr[j] * p.keep_scale : T(0);
    }
    for (int64_t j = 0; j < w; ++j) dsr[j] = pr[j] * (dsr[j] - dr) * p.scale;
    if (cr && p.col_stride == 1)
      for (int64_t j = 0; j < w; ++j) dsr[j] = cr[j] ? T(0) : dsr[j];
    else if (cr)
      for (int64_t j = 0; j < w; ++j) dsr[j] = cr[j * p.col_stride] ? T(0) : dsr[j];
  }
}

}  // namespace onnxtrain::kernels::attention
