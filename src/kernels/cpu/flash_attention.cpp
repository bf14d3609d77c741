// com.onnxtrain.FlashAttention and FlashAttentionGrad (ops/flash_attention.cpp) on the CPU, in float32 and
// float64 (bfloat16 natively where the CPU multiplies it: flash_attention_bf16.h; else, and float16, through
// in_float32). Work goes by tiles of 32 query rows and 256 keys: a tile's
// scores are one small product, softmaxed online (running row maxima and sums, the output rescaled as they
// grow), so no (Tq, Tk) buffer exists; under a mask whose fill vanishes under exp, the keys every row of a tile
// masks are skipped (half of a causal attention). The backward recomputes each tile's probabilities from the
// row log-sum-exp and accumulates dQ, dK and dV tile by tile; work splits over the key-value heads, so heads that
// share K and V (grouped-query attention) accumulate into them on one thread.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/flash_attention_bf16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

constexpr int64_t kRows = 32, kKeys = 256;
using attention::Params;

// s (mr, w) = the scaled, biased, masked scores of rows [r0, r0 + mr) and keys [j0, j0 + w) of one pair (q and k
// its Q's and K's first rows).
template <typename T>
void scores(const Params<T>& p, const AttentionGeometry& g, const T* q, const T* k, const bool* pair_cond,
            const T* pair_bias, int64_t r0, int64_t mr, int64_t j0, int64_t w, T* s) {
  gemm<T>(false, true, mr, w, g.d, p.scale, q + r0 * g.q.row, g.q.row, k + j0 * g.k.row, g.k.row, T(0), s, w);
  attention::bias_and_mask(p, pair_cond, pair_bias, r0, mr, j0, w, s);
}

template <typename T>
void forward_tile(const Params<T>& p, const AttentionGeometry& g, const attention::Bands<T, T>& bands, int64_t pair,
                  int64_t r0, const T* q, const T* k, const T* v, T* y, T* lse, T* s) {
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
  const AttentionBand& band = bands.at(pair, r0);
  for (int64_t j0 = band.lo; j0 < band.hi; j0 += kKeys) {
    const int64_t w = std::min(kKeys, band.hi - j0);
    scores(p, g, qi, ki, ci, bi, r0, mr, j0, w, s);
    attention::online_softmax(p, g, pair, r0, mr, j0, w, s, m, l, yi, ldy, keep);
    gemm<T>(false, false, mr, g.dv, w, T(1), s, w, vi + j0 * g.v.row, g.v.row, T(1), yi, ldy);
  }
  attention::finish_rows(p.zero_masked_rows, mr, g.dv, m, l, yi, ldy, li);
}

void flash_attention(KernelCtx& c) {
  AttentionGeometry g = attention_geometry(c, 0, 1, 2, 4, 8);
  if (c.in(0).dtype() == DType::kBFloat16) return flash_attention_bf16(c, g);  // (native: in_float32 below)
  dispatch<kWideFloats>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Params<T> p = attention::params<T>(c, g, 3);
    const attention::Bands<T, T> bands(p, g, kRows);
    const T* q = c.in(0).data<T>();
    const T *k = g.packed ? q + g.k_offset : c.in(1).data<T>(), *v = g.packed ? q + g.v_offset : c.in(2).data<T>();
    T* y = c.out(0).data<T>();
    std::vector<T> lse_scratch;
    T* lse = c.wants(1) ? c.out(1).data<T>() : (lse_scratch.resize(size_t(g.pairs * g.tq)), lse_scratch.data());
    const int64_t tiles = (g.tq + kRows - 1) / kRows;
    parallel_for(g.pairs * tiles, kRows * g.tk * (g.d + g.dv) * 2, [&](int64_t b, int64_t e) {
      std::vector<T> s(size_t(kRows * kKeys));
      for (int64_t u = b; u < e; ++u)
        forward_tile(p, g, bands, u / tiles, u % tiles * kRows, q, k, v, y, lse, s.data());
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
void backward_pair(const Params<T>& p, const AttentionGeometry& g, const attention::Bands<T, T>& bands, int64_t pair,
                   const T* dy, const T* q, const T* k, const T* v, const T* y, const T* lse, T* dq, T* dk, T* dv,
                   GradTiles<T>& t) {
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
    const AttentionBand& band = bands.at(pair, r0);
    for (int64_t j0 = band.lo; j0 < band.hi; j0 += kKeys) {
      const int64_t w = std::min(kKeys, band.hi - j0);
      T *pp = t.p.data(), *pd = p.dropout ? t.pd.data() : pp, *ds = t.ds.data();
      scores(p, g, qi, ki, ci, bi, r0, mr, j0, w, pp);
      attention::probabilities(p, g, pair, r0, mr, j0, w, li + r0, pp, pd, t.keep);
      // dV += Pd^T dY; dPd = dY V^T
      gemm<T>(true, false, w, g.dv, mr, T(1), pd, w, dyi + r0 * ldy, ldy, T(1), dvi + j0 * ldv, ldv);
      gemm<T>(false, true, mr, w, g.dv, T(1), dyi + r0 * ldy, ldy, vi + j0 * ldv, ldv, T(0), ds, w);
      attention::score_gradients(p, ci, r0, mr, j0, w, pp, t.row_dots.data() + r0, t.keep, ds);
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
  if (c.in(1).dtype() == DType::kBFloat16) return flash_attention_grad_bf16(c, g);
  dispatch<kWideFloats>(c.in(1).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (c.in(5).dtype() != c.in(1).dtype()) c.fail("LSE must have Q's dtype (float32 for lower precisions)");
    const Params<T> p = attention::params<T>(c, g, 6);
    const attention::Bands<T, T> bands(p, g, kRows);
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
        for (int64_t pair : heads[size_t(kv)]) backward_pair(p, g, bands, pair, dy, q, k, v, y, lse, dq, dk, dv, t);
      }
    });
  });
}

const bool kRegistered =
    register_kernels(kCpu, {in_float32({"com.onnxtrain", "FlashAttention", kernel(flash_attention)}, gemm_bf16_native),
                            in_float32({"com.onnxtrain", "FlashAttentionGrad", kernel(flash_attention_grad)},
                                       gemm_bf16_native)});

}  // namespace
}  // namespace onnxtrain::kernels
