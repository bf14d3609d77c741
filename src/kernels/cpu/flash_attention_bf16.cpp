#include "kernels/cpu/flash_attention_bf16.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/strided_copy.h"

namespace onnxtrain::kernels {
namespace {

// Larger tiles than the float32 kernel's: a product here is one oneDNN call, whose fixed cost is a few microseconds.
constexpr int64_t kRows = 128, kKeys = 512;
using Params = attention::Params<float, BFloat16>;
using Bands = attention::Bands<float, BFloat16>;

// A bfloat16 operand read as op() reads it: rows `ld` apart, transposed when `trans`.
Bf16Operand operand(const BFloat16* data, int64_t ld, bool trans = false) { return {data, ld, 0, trans}; }

// n rows of `cols` elements, `ld` apart from `first`, as consecutive rows: where they lie when they already are,
// else copied into buf. (oneDNN's AMX products take only operands whose rows are consecutive: sequence-major
// heads, their rows a few heads apart, would take its slower copying path.)
const BFloat16* dense_rows(const BFloat16* first, int64_t n, int64_t cols, int64_t ld, std::vector<BFloat16>& buf) {
  if (ld == cols) return first;
  if (buf.size() < size_t(n * cols)) buf.resize(size_t(n * cols));
  strided_copy(buf.data(), first, {n, cols}, {ld, 1});
  return buf.data();
}

// rows (m, n) of float32, n apart, rounded into rows `ld` apart.
void store_rows(const float* x, int64_t m, int64_t n, BFloat16* y, int64_t ld) {
  for (int64_t r = 0; r < m; ++r) from_f32(x + r * n, y + r * ld, n);
}

// A thread's buffers, made once and kept: a tile's scores and their bf16 copies, a pair's operands as consecutive
// rows, float32 sums of the outputs.
struct Tiles {
  std::vector<float> s = std::vector<float>(size_t(kRows * kKeys)), pd = s, ds = s, y, dq, dk, dv, dots;
  std::vector<BFloat16> s16 = std::vector<BFloat16>(size_t(kRows * kKeys)), q, k, v, dy;
  std::unique_ptr<bool[]> keep = std::make_unique<bool[]>(size_t(kRows * kKeys));
};

Tiles& tiles() {
  thread_local Tiles t;
  return t;
}

// v's first n elements, zeroed (grown where it is shorter).
float* zeroed(std::vector<float>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  std::fill_n(v.data(), n, 0.f);
  return v.data();
}

// The pair's K and V as consecutive rows.
struct KeysValues {
  const BFloat16 *k, *v;
};
KeysValues keys_values(const AttentionGeometry& g, int64_t kv, const BFloat16* k, const BFloat16* v, Tiles& t) {
  return {dense_rows(k + g.k.at(kv), g.tk, g.d, g.k.row, t.k), dense_rows(v + g.v.at(kv), g.tk, g.dv, g.v.row, t.v)};
}

// The fused row passes, where a bias and a mask (cond), if any, are read along their rows and the CPU has AVX-512
// (as every CPU with AVX512_BF16 does). Each makes one pass over a row of scores where the shared steps
// (attention_tiles.h) make several: scores are summed, exponentiated and rounded in one.
bool fused_rows(const Params& p) { return (!p.cond || p.col_stride == 1) && (!p.bias || p.bias_col == 1); }

// s[j] = cond[j] ? fill : s[j] + bias[j] (no mask or bias where null) for j < w, as attention::bias_and_mask; the
// largest s[j].
ONNXTRAIN_AVX512 float add_bias_max(float* s, const BFloat16* bias, const bool* cond, float fill, int64_t w) {
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 f = _mm512_set1_ps(fill);
  int64_t j = 0;
  for (; j + 16 <= w; j += 16) {
    __m512 x = _mm512_loadu_ps(s + j);
    if (bias) x = _mm512_add_ps(x, load_bf16(bias + j));
    if (cond) x = _mm512_mask_mov_ps(x, mask_of(cond + j), f);
    if (bias || cond) _mm512_storeu_ps(s + j, x);
    m = _mm512_max_ps(m, x);
  }
  float top = _mm512_reduce_max_ps(m);
  for (; j < w; ++j) {
    if (bias) s[j] += float(bias[j]);
    if (cond && cond[j]) s[j] = fill;
    top = std::max(top, s[j]);
  }
  return top;
}

// e[j] = exp(s[j] - shift) for j < w, written back to s where `keep_p`; out[j] = e[j] (times keep_scale where keep[j],
// 0 where not: dropout, when keep is not null) in bfloat16; the sum of e (the undropped probabilities).
ONNXTRAIN_AVX512 float exp_round(float* s, float shift, const bool* keep, float keep_scale, bool keep_p, BFloat16* out,
                                 int64_t w) {
  const __m512 sh = _mm512_set1_ps(shift), ks = _mm512_set1_ps(keep_scale);
  __m512 sum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= w; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), sh));
    sum = _mm512_add_ps(sum, e);
    if (keep_p) _mm512_storeu_ps(s + j, e);
    __m512 o = e;
    if (keep) o = _mm512_maskz_mul_ps(mask_of(keep + j), e, ks);
    store_bf16(out + j, o);
  }
  float total = _mm512_reduce_add_ps(sum);
  for (; j < w; ++j) {
    const float e = std::exp(s[j] - shift);
    total += e;
    if (keep_p) s[j] = e;
    out[j] = BFloat16(keep ? (keep[j] ? e * keep_scale : 0.f) : e);
  }
  return total;
}

// out[j] = P (dP - d) scale in bfloat16 for j < w: the scores' gradient from the probabilities p and dp, the
// gradient of the dropped ones (dP times keep_scale where keep[j], 0 where not, when keep is not null); 0 where
// cond[j] (a masked score is the fill, whatever the score was).
ONNXTRAIN_AVX512 void score_gradient_round(const float* p, const float* dp, float d, float scale, const bool* keep,
                                           float keep_scale, const bool* cond, BFloat16* out, int64_t w) {
  const __m512 dd = _mm512_set1_ps(d), sc = _mm512_set1_ps(scale), ks = _mm512_set1_ps(keep_scale);
  int64_t j = 0;
  for (; j + 16 <= w; j += 16) {
    __m512 g = _mm512_loadu_ps(dp + j);
    if (keep) g = _mm512_maskz_mul_ps(mask_of(keep + j), g, ks);
    __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(p + j), _mm512_sub_ps(g, dd)), sc);
    if (cond) v = _mm512_maskz_mov_ps(__mmask16(~mask_of(cond + j)), v);
    store_bf16(out + j, v);
  }
  for (; j < w; ++j) {
    const float g = keep ? (keep[j] ? dp[j] * keep_scale : 0.f) : dp[j];
    out[j] = BFloat16(cond && cond[j] ? 0.f : p[j] * (g - d) * scale);
  }
}

// D = rowsum(dY Y), the softmax gradient's row term, of a pair's tq rows (dY's consecutive, Y's ldy apart).
ONNXTRAIN_AVX512 void row_dots(const BFloat16* dy, const BFloat16* y, int64_t ldy, int64_t tq, int64_t dv,
                               float* dots) {
  for (int64_t r = 0; r < tq; ++r) {
    const BFloat16 *a = dy + r * dv, *b = y + r * ldy;
    __m512 sum = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= dv; c += 16) sum = _mm512_fmadd_ps(load_bf16(a + c), load_bf16(b + c), sum);
    float dot = _mm512_reduce_add_ps(sum);
    for (; c < dv; ++c) dot += float(a[c]) * float(b[c]);
    dots[r] = dot;
  }
}

// s (mr, w) = the scaled, biased, masked scores of rows [r0, r0 + mr) and keys [j0, j0 + w) of one pair (q and k
// its Q's and K's rows, consecutive).
void scores(const Params& p, const AttentionGeometry& g, const BFloat16* q, const BFloat16* k, const bool* pair_cond,
            const BFloat16* pair_bias, int64_t r0, int64_t mr, int64_t j0, int64_t w, float* s) {
  gemm_bf16(1, mr, w, g.d, operand(q + r0 * g.d, g.d), operand(k + j0 * g.d, g.d, true), s, p.scale);
  if (!fused_rows(p)) attention::bias_and_mask(p, pair_cond, pair_bias, r0, mr, j0, w, s);
}

// The bias and the mask of row r and keys [j0, ...) of a pair, or null.
const BFloat16* bias_row(const Params& p, const BFloat16* pair_bias, int64_t r, int64_t j0) {
  return pair_bias ? pair_bias + r * p.bias_row + j0 : nullptr;
}
const bool* cond_row(const Params& p, const bool* pair_cond, int64_t r, int64_t j0) {
  return pair_cond ? pair_cond + r * p.row_stride + j0 : nullptr;
}

// The fused rows' online softmax (attention::online_softmax's), their probabilities in t.s16.
void online_softmax(const Params& p, const AttentionGeometry& g, int64_t pair, const bool* pair_cond,
                    const BFloat16* pair_bias, int64_t r0, int64_t mr, int64_t j0, int64_t w, float* s, float* m,
                    float* l, float* y, Tiles& t) {
  for (int64_t r = 0; r < mr; ++r) {
    float* row = s + r * w;
    BFloat16* out = t.s16.data() + r * w;
    const float top =
        add_bias_max(row, bias_row(p, pair_bias, r0 + r, j0), cond_row(p, pair_cond, r0 + r, j0), p.fill, w);
    const float mn = std::max(m[r], top);
    if (mn == -std::numeric_limits<float>::infinity()) {  // every score so far is -inf: nothing to add yet
      std::fill_n(out, w, BFloat16(0.f));
      continue;
    }
    const float alpha = std::exp(m[r] - mn);
    bool* keep = p.dropout ? t.keep.get() : nullptr;
    if (keep) attention::dropout_row(p, uint64_t(pair * g.tq + r0 + r), g.tk, j0, w, keep);
    l[r] = l[r] * alpha + exp_round(row, mn, keep, p.keep_scale, false, out, w);
    m[r] = mn;
    if (alpha != 1.f)
      for (int64_t c = 0; c < g.dv; ++c) y[r * g.dv + c] *= alpha;
  }
}

// Rows [r0, r0 + mr) of a pair's output and their log-sum-exps (q, kv: its operands' rows, consecutive).
void forward_tile(const Params& p, const AttentionGeometry& g, const Bands& bands, int64_t pair, int64_t r0,
                  const BFloat16* q, KeysValues kv, BFloat16* y, float* lse, Tiles& t) {
  const int64_t mr = std::min(kRows, g.tq - r0);
  const bool* ci = p.cond ? p.cond + g.offset(g.cond_strides, pair) : nullptr;
  const BFloat16* bi = p.bias ? p.bias + g.offset(g.bias_strides, pair) : nullptr;
  float m[kRows], l[kRows], *s = t.s.data(), *ya = zeroed(t.y, mr * g.dv);
  std::fill(m, m + mr, -std::numeric_limits<float>::infinity());
  std::fill(l, l + mr, 0.f);
  const AttentionBand& band = bands.at(pair, r0);
  for (int64_t j0 = band.lo; j0 < band.hi; j0 += kKeys) {
    const int64_t w = std::min(kKeys, band.hi - j0);
    scores(p, g, q, kv.k, ci, bi, r0, mr, j0, w, s);
    if (fused_rows(p)) {
      online_softmax(p, g, pair, ci, bi, r0, mr, j0, w, s, m, l, ya, t);
    } else {
      attention::online_softmax(p, g, pair, r0, mr, j0, w, s, m, l, ya, g.dv, t.keep.get());
      from_f32(s, t.s16.data(), mr * w);
    }
    gemm_bf16(1, mr, g.dv, w, operand(t.s16.data(), w), operand(kv.v + j0 * g.dv, g.dv), ya, 1.f, nullptr, true);
  }
  attention::finish_rows(p.zero_masked_rows, mr, g.dv, m, l, ya, g.dv, lse + pair * g.tq + r0);
  store_rows(ya, mr, g.dv, y + g.y.at(pair, r0), g.y.row);
}

// dQ, and the pair's share of dK and dV, summed in float32 into t.dk and t.dv ((tk, d) and (tk, dv)); kv: the
// pair's K and V rows, consecutive.
void backward_pair(const Params& p, const AttentionGeometry& g, const Bands& bands, int64_t pair, const BFloat16* dy,
                   const BFloat16* q, KeysValues kv, const BFloat16* y, const float* lse, BFloat16* dq, Tiles& t) {
  const float* li = lse + pair * g.tq;
  const bool* ci = p.cond ? p.cond + g.offset(g.cond_strides, pair) : nullptr;
  const BFloat16* bi = p.bias ? p.bias + g.offset(g.bias_strides, pair) : nullptr;
  const BFloat16 *qi = dense_rows(q + g.q.at(pair), g.tq, g.d, g.q.row, t.q),
                 *dyi = dense_rows(dy + g.y.at(pair), g.tq, g.dv, g.y.row, t.dy);
  float *dots = zeroed(t.dots, g.tq), *dqa = zeroed(t.dq, g.tq * g.d), *dka = t.dk.data(), *dva = t.dv.data();
  row_dots(dyi, y + g.y.at(pair), g.y.row, g.tq, g.dv, dots);
  for (int64_t r0 = 0; r0 < g.tq; r0 += kRows) {
    const int64_t mr = std::min(kRows, g.tq - r0);
    const AttentionBand& band = bands.at(pair, r0);
    for (int64_t j0 = band.lo; j0 < band.hi; j0 += kKeys) {
      const int64_t w = std::min(kKeys, band.hi - j0);
      float *pp = t.s.data(), *pd = p.dropout ? t.pd.data() : pp, *ds = t.ds.data();
      BFloat16* x16 = t.s16.data();
      scores(p, g, qi, kv.k, ci, bi, r0, mr, j0, w, pp);
      if (fused_rows(p)) {  // P in pp, the dropped P rounded in x16
        for (int64_t r = 0; r < mr; ++r) {
          float* row = pp + r * w;
          bool* keep = p.dropout ? t.keep.get() + r * w : nullptr;
          add_bias_max(row, bias_row(p, bi, r0 + r, j0), cond_row(p, ci, r0 + r, j0), p.fill, w);
          if (keep) attention::dropout_row(p, uint64_t(pair * g.tq + r0 + r), g.tk, j0, w, keep);
          exp_round(row, li[r0 + r], keep, p.keep_scale, true, x16 + r * w, w);
        }
      } else {
        attention::probabilities(p, g, pair, r0, mr, j0, w, li + r0, pp, pd, t.keep.get());
        from_f32(pd, x16, mr * w);
      }
      // dV += Pd^T dY; dPd = dY V^T
      gemm_bf16(1, w, g.dv, mr, operand(x16, w, true), operand(dyi + r0 * g.dv, g.dv), dva + j0 * g.dv, 1.f,
                nullptr, true);
      gemm_bf16(1, mr, w, g.dv, operand(dyi + r0 * g.dv, g.dv), operand(kv.v + j0 * g.dv, g.dv, true), ds);
      if (fused_rows(p)) {
        for (int64_t r = 0; r < mr; ++r) {
          const bool* keep = p.dropout ? t.keep.get() + r * w : nullptr;
          score_gradient_round(pp + r * w, ds + r * w, dots[r0 + r], p.scale, keep, p.keep_scale,
                               cond_row(p, ci, r0 + r, j0), x16 + r * w, w);
        }
      } else {
        attention::score_gradients(p, ci, r0, mr, j0, w, pp, dots + r0, t.keep.get(), ds);
        from_f32(ds, x16, mr * w);
      }
      // dQ += dS K; dK += dS^T Q
      gemm_bf16(1, mr, g.d, w, operand(x16, w), operand(kv.k + j0 * g.d, g.d), dqa + r0 * g.d, 1.f, nullptr, true);
      gemm_bf16(1, w, g.d, mr, operand(x16, w, true), operand(qi + r0 * g.d, g.d), dka + j0 * g.d, 1.f, nullptr,
                true);
    }
  }
  store_rows(dqa, g.tq, g.d, dq + g.q.at(pair), g.q.row);
}

}  // namespace

void flash_attention_bf16(KernelCtx& c, const AttentionGeometry& g) {
  const Params p = attention::params<float, BFloat16>(c, g, 3);
  const BFloat16* q = c.in(0).data<BFloat16>();
  const BFloat16 *k = g.packed ? q + g.k_offset : c.in(1).data<BFloat16>();
  const BFloat16 *v = g.packed ? q + g.v_offset : c.in(2).data<BFloat16>();
  BFloat16* y = c.out(0).data<BFloat16>();
  std::vector<float> lse_scratch;
  float* lse = c.wants(1) ? c.out(1).data<float>() : (lse_scratch.resize(size_t(g.pairs * g.tq)), lse_scratch.data());
  const Bands bands(p, g, kRows);
  parallel_for(g.pairs, g.tq * g.tk * (g.d + g.dv) * 2, [&](int64_t b, int64_t e) {
    Tiles& t = tiles();
    for (int64_t pair = b; pair < e; ++pair) {
      const KeysValues kv = keys_values(g, g.kv_of(pair), k, v, t);
      const BFloat16* qi = dense_rows(q + g.q.at(pair), g.tq, g.d, g.q.row, t.q);
      for (int64_t r0 = 0; r0 < g.tq; r0 += kRows) forward_tile(p, g, bands, pair, r0, qi, kv, y, lse, t);
    }
  });
}

void flash_attention_grad_bf16(KernelCtx& c, const AttentionGeometry& g) {
  if (c.in(5).dtype() != DType::kFloat32) c.fail("LSE must be float32 for bfloat16 Q");
  const Params p = attention::params<float, BFloat16>(c, g, 6);
  const BFloat16 *dy = c.in(0).data<BFloat16>(), *q = c.in(1).data<BFloat16>(), *y = c.in(4).data<BFloat16>();
  const BFloat16 *k = g.packed ? q + g.k_offset : c.in(2).data<BFloat16>();
  const BFloat16 *v = g.packed ? q + g.v_offset : c.in(3).data<BFloat16>();
  const float* lse = c.in(5).data<float>();
  BFloat16* dq = c.out(0).data<BFloat16>();  // (packed: dX, dK's and dV's columns in it)
  BFloat16 *dk = g.packed ? dq + g.k_offset : c.out(1).data<BFloat16>();
  BFloat16 *dv = g.packed ? dq + g.v_offset : c.out(2).data<BFloat16>();
  std::vector<std::vector<int64_t>> heads(size_t(g.kv_count));  // the pairs reading each K and V
  for (int64_t i = 0; i < g.pairs; ++i) heads[size_t(g.kv_of(i))].push_back(i);
  const int64_t per_kv = std::max<int64_t>(1, g.pairs / std::max<int64_t>(1, g.kv_count));
  const Bands bands(p, g, kRows);
  parallel_for(g.kv_count, per_kv * g.tq * g.tk * (g.d + g.dv) * 4, [&](int64_t b, int64_t e) {
    Tiles& t = tiles();
    for (int64_t kv = b; kv < e; ++kv) {
      zeroed(t.dk, g.tk * g.d), zeroed(t.dv, g.tk * g.dv);
      const KeysValues rows = keys_values(g, kv, k, v, t);
      for (int64_t pair : heads[size_t(kv)]) backward_pair(p, g, bands, pair, dy, q, rows, y, lse, dq, t);
      store_rows(t.dk.data(), g.tk, g.d, dk + g.k.at(kv), g.k.row);
      store_rows(t.dv.data(), g.tk, g.dv, dv + g.v.at(kv), g.v.row);
    }
  });
}

}  // namespace onnxtrain::kernels
