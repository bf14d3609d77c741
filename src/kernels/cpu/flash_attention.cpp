// com.onnxtrain.FlashAttention and FlashAttentionGrad (ops/flash_attention.cpp) on the CPU, in float32 and
// float64 (bfloat16 and float16 through in_float32). Work goes by tiles of 32 query rows and 256 keys: a tile's
// scores are one small product, softmaxed online (running row maxima and sums, the output rescaled as they
// grow), so no (Tq, Tk) buffer exists; under a mask whose fill vanishes under exp, the keys every row of a tile
// masks are skipped (half of a causal attention). The backward recomputes each tile's probabilities from the
// row log-sum-exp and accumulates dQ, dK and dV tile by tile; work splits over the key-value heads, so heads that
// share K and V (grouped-query attention) accumulate into them on one thread.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/attention_geometry.h"
#include "kernels/cpu/attention_band.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/counter_random.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

constexpr int64_t kRows = 32, kKeys = 256;
// A fill or bias at or below this vanishes under exp next to any score a row can hold: its keys may be skipped.
constexpr double kVanishes = -1e30;

// The scalars and the mask of one call.
template <typename T>
struct Params {
  T scale = 1, fill = 0;
  const bool* cond = nullptr;
  int64_t row_stride = 0, col_stride = 0;  // the mask's, over a pair's (tq, tk) scores
  const T* bias = nullptr;
  int64_t bias_row = 0, bias_col = 0;
  bool fill_vanishes = false;     // exp(fill - m) is 0 for any score m a row can hold: masked keys may be skipped
  bool zero_masked_rows = false;  // a fully masked row gives zeros (LSE +inf), not NaN
  bool dropout = false;
  uint32_t threshold = 0;
  T keep_scale = 1;
  uint64_t seed = 0;
};

template <typename T>
T scalar(const KernelCtx& c, size_t i, const char* what) {
  if (c.in(i).numel() != 1) c.fail(std::string(what) + " must be a scalar");
  return c.in(i).data<T>()[0];
}

template <typename T>
Params<T> params(const KernelCtx& c, const AttentionGeometry& g, size_t first_scalar) {
  const size_t scale = first_scalar, cond = scale + 1, fill = scale + 2, ratio = scale + 3, training = scale + 4,
               bias = scale + 5;
  Params<T> p;
  p.zero_masked_rows = c.node.attr_int("zero_masked_rows", 0) != 0;
  if (c.has(scale)) p.scale = scalar<T>(c, scale, "scale");
  if (c.has(bias)) {
    const size_t q = first_scalar == 3 ? 0 : 1;  // (the forward's inputs, or the gradient's)
    if (c.in(bias).dtype() != c.in(q).dtype()) c.fail("bias must have Q's dtype");
    p.bias = c.in(bias).data<T>();
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

// The first of bias row[from, to) that does not vanish under exp (above kVanishes, or NaN), else to; and one past
// the last, else from. Eight floats a compare: a causal bias's rows are mostly vanishing keys, each row scanned
// once a tile of every head.
template <typename T>
int64_t first_kept(const T* row, int64_t from, int64_t to) {
  if constexpr (std::is_same_v<T, float>)
    for (const __m256 bound = _mm256_set1_ps(float(kVanishes)); from + 8 <= to; from += 8)
      if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + from), bound, _CMP_NLE_UQ))) break;
  while (from < to && row[from] <= T(kVanishes)) ++from;
  return from;
}
template <typename T>
int64_t last_kept(const T* row, int64_t from, int64_t to) {
  if constexpr (std::is_same_v<T, float>)
    for (const __m256 bound = _mm256_set1_ps(float(kVanishes)); to - 8 >= from; to -= 8)
      if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + to - 8), bound, _CMP_NLE_UQ))) break;
  while (to > from && row[to - 1] <= T(kVanishes)) --to;
  return to;
}

// The keys the tile of rows [r0, r1) of one pair reads: all but those every row masks, when skipping is exact (a
// mask whose fill vanishes under exp, or a bias of such values where there is no mask).
template <typename T>
AttentionBand band_of(const Params<T>& p, const bool* pair_cond, const T* pair_bias, int64_t r0, int64_t r1,
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
    const T* row = pair_bias + r * p.bias_row;
    const int64_t lo = first_kept(row, 0, tk);
    if (lo == tk) return all;
    b.lo = std::min(b.lo, lo), b.hi = std::max(b.hi, last_kept(row, std::max(lo, b.hi), tk));
  }
  return b;
}

// s (mr, w) = the scaled, biased, masked scores of rows [r0, r0 + mr) and keys [j0, j0 + w) of one pair (q and k
// its Q's and K's first rows).
template <typename T>
void scores(const Params<T>& p, const AttentionGeometry& g, const T* q, const T* k, const bool* pair_cond,
            const T* pair_bias, int64_t r0, int64_t mr, int64_t j0, int64_t w, T* s) {
  gemm<T>(false, true, mr, w, g.d, p.scale, q + r0 * g.q.row, g.q.row, k + j0 * g.k.row, g.k.row, T(0), s, w);
  for (int64_t r = 0; r < mr; ++r) {
    T* row = s + r * w;
    if (pair_bias) {
      const T* br = pair_bias + (r0 + r) * p.bias_row + j0 * p.bias_col;
      for (int64_t j = 0; j < w; ++j) row[j] += br[j * p.bias_col];
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
template <typename T>
void dropout_row(const Params<T>& p, uint64_t row, int64_t tk, int64_t j0, int64_t w, bool* keep) {
  dropout_keeps_run(p.seed, row * uint64_t(tk) + uint64_t(j0), w, p.threshold, keep);
}

template <typename T>
void forward_tile(const Params<T>& p, const AttentionGeometry& g, int64_t pair, int64_t r0, const T* q, const T* k,
                  const T* v, T* y, T* lse, T* s) {
  const int64_t mr = std::min(kRows, g.tq - r0), kv = g.kv_of(pair), ldy = g.y.row;
  const T *qi = q + g.q.at(pair), *ki = k + g.k.at(kv), *vi = v + g.v.at(kv);
  const bool* ci = p.cond ? p.cond + g.offset(g.cond_strides, pair) : nullptr;
  const T* bi = p.bias ? p.bias + g.offset(g.bias_strides, pair) : nullptr;
  T *yi = y + g.y.at(pair, r0), *li = lse + pair * g.tq + r0;
  T m[kRows], l[kRows];
  bool keep[kKeys];
  std::fill(m, m + mr, -std::numeric_limits<T>::infinity());
  std::fill(l, l + mr, T(0));
  for (int64_t r = 0; r < mr; ++r) std::fill(yi + r * ldy, yi + r * ldy + g.dv, T(0));
  AttentionBand band = band_of(p, ci, bi, r0, r0 + mr, g.tk);
  for (int64_t j0 = band.lo; j0 < band.hi; j0 += kKeys) {
    const int64_t w = std::min(kKeys, band.hi - j0);
    scores(p, g, qi, ki, ci, bi, r0, mr, j0, w, s);
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
        for (int64_t c = 0; c < g.dv; ++c) yi[r * ldy + c] *= alpha;
    }
    gemm<T>(false, false, mr, g.dv, w, T(1), s, w, vi + j0 * g.v.row, g.v.row, T(1), yi, ldy);
  }
  for (int64_t r = 0; r < mr; ++r) {
    T* yr = yi + r * ldy;
    if (l[r] == T(0)) {  // every score -inf (a fully masked row): NaN as Softmax gives, or zeros
      std::fill(yr, yr + g.dv, p.zero_masked_rows ? T(0) : std::numeric_limits<T>::quiet_NaN());
      li[r] = p.zero_masked_rows ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    const T inv = T(1) / l[r];
    for (int64_t c = 0; c < g.dv; ++c) yr[c] *= inv;
    li[r] = m[r] + std::log(l[r]);
  }
}

void flash_attention(KernelCtx& c) {
  AttentionGeometry g = attention_geometry(c, 0, 1, 2, 4, 8);
  dispatch<kWideFloats>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Params<T> p = params<T>(c, g, 3);
    const T* q = c.in(0).data<T>();
    const T *k = g.packed ? q + g.k_offset : c.in(1).data<T>(), *v = g.packed ? q + g.v_offset : c.in(2).data<T>();
    T* y = c.out(0).data<T>();
    std::vector<T> lse_scratch;
    T* lse = c.wants(1) ? c.out(1).data<T>() : (lse_scratch.resize(size_t(g.pairs * g.tq)), lse_scratch.data());
    const int64_t tiles = (g.tq + kRows - 1) / kRows;
    parallel_for(g.pairs * tiles, kRows * g.tk * (g.d + g.dv) * 2, [&](int64_t b, int64_t e) {
      std::vector<T> s(size_t(kRows * kKeys));
      for (int64_t u = b; u < e; ++u) forward_tile(p, g, u / tiles, u % tiles * kRows, q, k, v, y, lse, s.data());
    });
  });
}

// Tile buffers of one thread's backward.
template <typename T>
struct GradTiles {
  std::vector<T> p = std::vector<T>(size_t(kRows * kKeys)), pd = p, ds = p, row_dots;
  bool keep[kRows * kKeys];
};

// dQ, and the pair's share of dK and dV (accumulated: heads sharing K and V run on one thread).
template <typename T>
void backward_pair(const Params<T>& p, const AttentionGeometry& g, int64_t pair, const T* dy, const T* q, const T* k,
                   const T* v, const T* y, const T* lse, T* dq, T* dk, T* dv, GradTiles<T>& t) {
  const int64_t kv = g.kv_of(pair), ldq = g.q.row, ldk = g.k.row, ldv = g.v.row, ldy = g.y.row;
  const T *dyi = dy + g.y.at(pair), *qi = q + g.q.at(pair), *yi = y + g.y.at(pair);
  const T *ki = k + g.k.at(kv), *vi = v + g.v.at(kv), *li = lse + pair * g.tq;
  T *dqi = dq + g.q.at(pair), *dki = dk + g.k.at(kv), *dvi = dv + g.v.at(kv);
  const bool* ci = p.cond ? p.cond + g.offset(g.cond_strides, pair) : nullptr;
  const T* bi = p.bias ? p.bias + g.offset(g.bias_strides, pair) : nullptr;
  t.row_dots.resize(size_t(g.tq));
  for (int64_t r = 0; r < g.tq; ++r) {  // D = rowsum(dY Y) = rowsum(dP P): the softmax gradient's row term
    double dot = 0;
    for (int64_t c = 0; c < g.dv; ++c) dot += double(dyi[r * ldy + c]) * double(yi[r * ldy + c]);
    t.row_dots[size_t(r)] = T(dot);
  }
  for (int64_t r = 0; r < g.tq; ++r) std::fill(dqi + r * ldq, dqi + r * ldq + g.d, T(0));
  for (int64_t r0 = 0; r0 < g.tq; r0 += kRows) {
    const int64_t mr = std::min(kRows, g.tq - r0);
    AttentionBand band = band_of(p, ci, bi, r0, r0 + mr, g.tk);
    for (int64_t j0 = band.lo; j0 < band.hi; j0 += kKeys) {
      const int64_t w = std::min(kKeys, band.hi - j0);
      T *pp = t.p.data(), *pd = p.dropout ? t.pd.data() : pp, *ds = t.ds.data();
      scores(p, g, qi, ki, ci, bi, r0, mr, j0, w, pp);
      for (int64_t r = 0; r < mr; ++r) {
        T* row = pp + r * w;
        exp_shifted(row, li[r0 + r], w);
        if (p.dropout) {
          bool* keep = t.keep + r * w;
          dropout_row(p, uint64_t(pair * g.tq + r0 + r), g.tk, j0, w, keep);
          for (int64_t j = 0; j < w; ++j) pd[r * w + j] = keep[j] ? row[j] * p.keep_scale : T(0);
        }
      }
      // dV += Pd^T dY; dPd = dY V^T
      gemm<T>(true, false, w, g.dv, mr, T(1), pd, w, dyi + r0 * ldy, ldy, T(1), dvi + j0 * ldv, ldv);
      gemm<T>(false, true, mr, w, g.dv, T(1), dyi + r0 * ldy, ldy, vi + j0 * ldv, ldv, T(0), ds, w);
      for (int64_t r = 0; r < mr; ++r) {  // dS = P (dP - D) scale, 0 where masked (the fill is a constant)
        const bool* cr = ci ? ci + (r0 + r) * p.row_stride + j0 * p.col_stride : nullptr;
        const T dr = t.row_dots[size_t(r0 + r)];
        T *dsr = ds + r * w, *pr = pp + r * w;
        if (p.dropout) {
          const bool* keep = t.keep + r * w;
          for (int64_t j = 0; j < w; ++j) dsr[j] = keep[j] ? dsr[j] * p.keep_scale : T(0);
        }
        for (int64_t j = 0; j < w; ++j) dsr[j] = pr[j] * (dsr[j] - dr) * p.scale;
        if (cr && p.col_stride == 1)
          for (int64_t j = 0; j < w; ++j) dsr[j] = cr[j] ? T(0) : dsr[j];
        else if (cr)
          for (int64_t j = 0; j < w; ++j) dsr[j] = cr[j * p.col_stride] ? T(0) : dsr[j];
      }
      // dQ += dS K; dK += dS^T Q
      gemm<T>(false, false, mr, g.d, w, T(1), ds, w, ki + j0 * ldk, ldk, T(1), dqi + r0 * ldq, ldq);
      gemm<T>(true, false, w, g.d, mr, T(1), ds, w, qi + r0 * ldq, ldq, T(1), dki + j0 * ldk, ldk);
    }
  }
}

void flash_attention_grad(KernelCtx& c) {
  AttentionGeometry g = attention_geometry(c, 1, 2, 3, 7, 11);
  if (c.in(0).dims() != c.in(4).dims() || c.in(4).numel() != g.pairs * g.tq * g.dv)
    c.fail("dY " + dims_str(c.in(0).dims()) + " and Y " + dims_str(c.in(4).dims()) + " must be the output's shape");
  if (c.in(5).numel() != g.pairs * g.tq) c.fail("LSE " + dims_str(c.in(5).dims()) + " must hold a value per row");
  dispatch<kWideFloats>(c.in(1).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (c.in(5).dtype() != c.in(1).dtype()) c.fail("LSE must have Q's dtype (float32 for lower precisions)");
    const Params<T> p = params<T>(c, g, 6);
    const T *dy = c.in(0).data<T>(), *q = c.in(1).data<T>(), *y = c.in(4).data<T>(), *lse = c.in(5).data<T>();
    const T *k = g.packed ? q + g.k_offset : c.in(2).data<T>(), *v = g.packed ? q + g.v_offset : c.in(3).data<T>();
    T* dq = c.out(0).data<T>();  // (packed: dX, dK's and dV's columns in it)
    T *dk = g.packed ? dq + g.k_offset : c.out(1).data<T>(), *dv = g.packed ? dq + g.v_offset : c.out(2).data<T>();
    std::vector<std::vector<int64_t>> heads(size_t(g.kv_count));  // the pairs reading each K and V
    for (int64_t i = 0; i < g.pairs; ++i) heads[size_t(g.kv_of(i))].push_back(i);
    const int64_t per_kv = std::max<int64_t>(1, g.pairs / std::max<int64_t>(1, g.kv_count));
    parallel_for(g.kv_count, per_kv * g.tq * g.tk * (g.d + g.dv) * 4, [&](int64_t b, int64_t e) {
      GradTiles<T> t;
      for (int64_t kv = b; kv < e; ++kv) {
        for (int64_t j = 0; j < g.tk; ++j) {
          std::fill_n(dk + g.k.at(kv, j), g.d, T(0));
          std::fill_n(dv + g.v.at(kv, j), g.dv, T(0));
        }
        for (int64_t pair : heads[size_t(kv)]) backward_pair(p, g, pair, dy, q, k, v, y, lse, dq, dk, dv, t);
      }
    });
  });
}

const bool kRegistered =
    register_kernels(kCpu, {
                               in_float32({"com.onnxtrain", "FlashAttention", kernel(flash_attention)}),
                               in_float32({"com.onnxtrain", "FlashAttentionGrad", kernel(flash_attention_grad)}),
                           });

}  // namespace
}  // namespace onnxtrain::kernels
