// Blocks of com.onnxtrain.LinearCrossEntropy's scores (linear_cross_entropy.h): formed, and turned into their
// gradient; forward's loss pass and the gradients forward forms for a loss of one number (outputs 2-4: dX, dW, dB
// for a loss gradient of 1), each a block of classes at a time over all rows, in float32, float64 and bfloat16.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/linear_cross_entropy.h"
#include "kernels/cpu/vector_math.h"

namespace onnxtrain::kernels::lce {

int64_t column_width(int64_t rows, int64_t classes, size_t elem) {
  const int64_t fit = kBlockBytes / std::max<int64_t>(1, rows * int64_t(elem));
  return std::min(std::max<int64_t>(fit, 256), classes);
}

template <typename T>
void block_scores(const Rows& r, const T* x, const T* w, const T* b, const Block& k, T* s) {
  gemm<T>(false, true, k.m, k.cb, r.k, T(1), x + k.r0 * r.k, r.k, w + k.c0 * r.k, r.k, T(0), s, k.cb);
  if (b)
    for (int64_t i = 0; i < k.m; ++i)
      for (int64_t j = 0; j < k.cb; ++j) s[i * k.cb + j] += b[k.c0 + j];
  if constexpr (std::is_same_v<T, float>) round_to(r.rounded, s, k.m * k.cb);  // (a 16-bit head on float32 copies)
}

void block_scores(const Rows& r, const BFloat16* x, const BFloat16* w, const BFloat16* b, const Block& k, float* s) {
  gemm_bf16(1, k.m, k.cb, r.k, {x + k.r0 * r.k, r.k}, {w + k.c0 * r.k, r.k, 0, true}, s, 1, b ? b + k.c0 : nullptr);
  round_to(DType::kBFloat16, s, k.m * k.cb);
}

namespace {

template <typename T>
void exp_in_place(T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    exp_f32(x, x, n);
  else
    for (int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j]);
}

}  // namespace

template <typename T>
void block_gradients(const LossAttrs& a, const Rows& r, const T* dloss, T scale, const RowStats<T>* stats,
                     const Block& k, T* s) {
  parallel_for(k.m, k.cb * 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row_index = k.r0 + i, t = r.target[size_t(row_index)];
      T* row = s + i * k.cb;
      if (ignored(a, t)) {
        std::fill(row, row + k.cb, T(0));
        continue;
      }
      const T per = dloss[a.reduction == LossAttrs::kNone ? row_index : 0] * scale;
      T miss, factor = per;
      if (stats) {
        const T m = stats->max[row_index], log_sum = stats->log_sum[row_index];
        for (int64_t j = 0; j < k.cb; ++j) row[j] = (row[j] - m) - log_sum;
        exp_in_place(row, k.cb);
        miss = stats->miss[row_index];
      } else {  // (the row whole: its maximum and sums from its scores)
        const T m = row_max(row, k.cb);
        for (int64_t j = 0; j < k.cb; ++j) row[j] -= m;
        exp_in_place(row, k.cb);
        const T term = row[t];
        row[t] = 0;
        const T rest = T(row_sum(row, k.cb)), l = rest + term;
        miss = rest / l;
        factor = per / l;
      }
      for (int64_t j = 0; j < k.cb; ++j) row[j] *= factor;
      if (t >= k.c0 && t < k.c0 + k.cb) row[t - k.c0] = -per * miss;
    }
  });
}

template void block_scores<float>(const Rows&, const float*, const float*, const float*, const Block&, float*);
template void block_scores<double>(const Rows&, const double*, const double*, const double*, const Block&, double*);
template void block_gradients<float>(const LossAttrs&, const Rows&, const float*, float, const RowStats<float>*,
                                     const Block&, float*);
template void block_gradients<double>(const LossAttrs&, const Rows&, const double*, double, const RowStats<double>*,
                                      const Block&, double*);

namespace {

// dB[c0:c0+cb] = the column sums of s (n, cb), summed in A.
template <typename S, typename A>
void column_sums(const Rows& r, const A* s, int64_t c0, int64_t cb, S* db) {
  parallel_for(cb, r.n * 2, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      A sum(0);
      for (int64_t i = 0; i < r.n; ++i) sum += s[i * cb + j];
      db[c0 + j] = S(sum);
    }
  });
}

}  // namespace

// The gradients of forward (outputs 2-4: dX, dW, dB for a loss gradient of 1) a block of classes at a time: each
// block's scores are computed again over all rows (or, where the loss pass wrote them to output 5, read back from
// there: they are the scores, a 16-bit head's rounded to its dtype as output 5 holds them), turned into their gradient,
// and multiplied into its rows of dW and dB, formed whole at once, and into dX, accumulated over the blocks (in float32
// scratch for bfloat16, the block's gradient rounded to bf16 for the GEMMs, as autocast's Cast backward rounds it).
// Blocks of classes rather than of rows, since a head has far fewer rows than classes: the (C, K) dW is written once
// instead of once per block of rows, at the price of the scores' product once more where they were not kept.
template <typename S, typename A>
void forward_gradients(const LossAttrs& a, const Rows& r, KernelCtx& c, A* s, const RowStats<A>& stats,
                       ScratchCarver& scratch) {
  const S *x = c.in(0).data<S>(), *w = c.in(1).data<S>(), *b = c.has(2) ? c.in(2).data<S>() : nullptr;
  S* dx = c.wants(2) ? c.out(2).data<S>() : nullptr;
  S* dw = c.wants(3) ? c.out(3).data<S>() : nullptr;
  S* db = c.wants(4) ? c.out(4).data<S>() : nullptr;
  if (r.n == 0) {  // (no rows: dX is empty, dW and dB zeros)
    if (dw) std::fill(dw, dw + r.c * r.k, S(0));
    if (db) std::fill(db, db + r.c, S(0));
    return;
  }
  const int64_t width = column_width(r.n, r.c, sizeof(A));
  BFloat16* g = nullptr;
  float* dx32 = nullptr;
  if constexpr (std::is_same_v<S, BFloat16>) {
    g = scratch.take<BFloat16>(r.n * width);
    dx32 = dx ? scratch.take<float>(r.n * r.k) : nullptr;
  }
  const S* kept = c.wants(5) ? c.out(5).data<S>() : nullptr;  // (N, C): the loss pass's
  const A one(1), scale = mean_scale<A>(a, r);
  for (int64_t c0 = 0; c0 < r.c; c0 += width) {
    const int64_t cb = std::min(width, r.c - c0);
    const Block block{0, r.n, c0, cb};
    if (kept)
      parallel_for(r.n, cb, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          if constexpr (std::is_same_v<S, A>)
            std::copy(kept + i * r.c + c0, kept + i * r.c + c0 + cb, s + i * cb);
          else
            to_f32(kept + i * r.c + c0, s + i * cb, cb);
        }
      });
    else
      block_scores(r, x, w, b, block, s);
    block_gradients(a, r, &one, scale, &stats, block, s);
    if (db) column_sums(r, s, c0, cb, db);
    if constexpr (std::is_same_v<S, BFloat16>) {
      from_f32(s, g, r.n * cb);
      if (dw) gemm_bf16(1, cb, r.k, r.n, {g, cb, 0, true}, {x, r.k}, dw + c0 * r.k);
      if (dx) gemm_bf16(1, r.n, r.k, cb, {g, cb}, {w + c0 * r.k, r.k}, dx32, 1, nullptr, c0 > 0);
    } else {
      if (dw) gemm<S>(true, false, cb, r.k, r.n, S(1), s, cb, x, r.k, S(0), dw + c0 * r.k, r.k);
      if (dx) gemm<S>(false, false, r.n, r.k, cb, S(1), s, cb, w + c0 * r.k, r.k, S(c0 ? 1 : 0), dx, r.k);
    }
  }
  if constexpr (std::is_same_v<S, BFloat16>)
    if (dx) from_f32(dx32, dx, r.n * r.k);
}

// Forward's pass over blocks of classes, as flash attention's forward runs over keys: each row keeps the running
// maximum m of its scores and the sum of exp(s - m) over its classes but the target, rescaled whenever m grows, and,
// for a frozen head's dX, U = the same sum of exp(s - m) W[class]; at the end, with the target's term e_t and l the
// whole sum, dX = scale * (U / l - (1 - p_target) W[target]). Each block of W is read once, by one GEMM over all rows
// (blocks of rows would read all of W per block: twice as slow at a 49152-word vocabulary), and a frozen head's dX
// needs no second pass.
template <typename S, typename A>
void loss_pass(const LossAttrs& a, const Rows& r, KernelCtx& c, A* s, const RowStats<A>& stats, A* loss,
               bool with_dx, ScratchCarver& scratch) {
  const S *x = c.in(0).data<S>(), *w = c.in(1).data<S>(), *b = c.has(2) ? c.in(2).data<S>() : nullptr;
  S* out = c.wants(5) ? c.out(5).data<S>() : nullptr;  // the scores themselves, when asked for
  S* dx = with_dx ? c.out(2).data<S>() : nullptr;
  A *running = stats.max, *rest = stats.log_sum, *picked = loss;  // (until the end; picked: the target's score)
  std::fill(running, running + r.n, -std::numeric_limits<A>::infinity());
  std::fill(rest, rest + r.n, A(0));
  std::fill(picked, picked + r.n, A(0));
  const int64_t width = column_width(r.n, r.c, sizeof(A));
  BFloat16* g = nullptr;
  A* u = nullptr;
  if constexpr (std::is_same_v<S, BFloat16>) {
    if (dx) {
      g = scratch.take<BFloat16>(r.n * width);
      u = scratch.take<float>(r.n * r.k);
    }
  } else {
    u = dx;
  }
  for (int64_t c0 = 0; c0 < r.c && r.n; c0 += width) {
    const int64_t cb = std::min(width, r.c - c0);
    block_scores(r, x, w, b, {0, r.n, c0, cb}, s);
    parallel_for(r.n, cb * 8, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        A* row = s + i * cb;
        if (out) {
          if constexpr (std::is_same_v<S, A>)
            std::copy(row, row + cb, out + i * r.c + c0);
          else
            from_f32(row, out + i * r.c + c0, cb);
        }
        const int64_t t = r.target[size_t(i)];
        const bool here = !ignored(a, t) && t >= c0 && t < c0 + cb;
        if (here) picked[i] = row[t - c0];
        const A m = std::max(running[i], row_max(row, cb));
        const A factor = std::isfinite(m) ? std::exp(running[i] - m) : A(0);
        for (int64_t j = 0; j < cb; ++j) row[j] -= m;
        exp_in_place(row, cb);
        if (here) row[t - c0] = 0;
        rest[i] = rest[i] * factor + A(row_sum(row, cb));
        running[i] = m;
        if (u && c0 > 0)
          for (int64_t j = 0; j < r.k; ++j) u[i * r.k + j] *= factor;
      }
    });
    if (!dx) continue;
    if constexpr (std::is_same_v<S, BFloat16>) {
      from_f32(s, g, r.n * cb);
      gemm_bf16(1, r.n, r.k, cb, {g, cb}, {w + c0 * r.k, r.k}, u, 1, nullptr, c0 > 0);
    } else {
      gemm<S>(false, false, r.n, r.k, cb, S(1), s, cb, w + c0 * r.k, r.k, S(c0 ? 1 : 0), u, r.k);
    }
  }
  const A scale = mean_scale<A>(a, r);
  parallel_for(r.n, r.k * 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = r.target[size_t(i)];
      const bool valid = !ignored(a, t), finite = std::isfinite(running[i]);
      const A m = running[i], others = rest[i], term = valid && finite ? std::exp(picked[i] - m) : A(0);
      const A l = others + term, miss = valid ? others / l : A(0);
      stats.miss[i] = miss;
      stats.log_sum[i] = finite ? std::log(l) : A(0);
      loss[i] = !valid                 ? A(0)
                : term > A(1e-30)      ? std::log1p(others / term)
                                       : stats.log_sum[i] + (m - picked[i]);
      if (!dx) continue;
      const A per = valid ? scale : A(0), inv = per / l;
      for (int64_t j = 0; j < r.k; ++j) {
        const A target_row = valid ? A(w[t * r.k + j]) : A(0);
        dx[i * r.k + j] = S(u[i * r.k + j] * inv - per * miss * target_row);
      }
    }
  });
}

template void loss_pass<float, float>(const LossAttrs&, const Rows&, KernelCtx&, float*, const RowStats<float>&,
                                      float*, bool, ScratchCarver&);
template void loss_pass<double, double>(const LossAttrs&, const Rows&, KernelCtx&, double*, const RowStats<double>&,
                                        double*, bool, ScratchCarver&);
template void loss_pass<BFloat16, float>(const LossAttrs&, const Rows&, KernelCtx&, float*, const RowStats<float>&,
                                         float*, bool, ScratchCarver&);

template void forward_gradients<float, float>(const LossAttrs&, const Rows&, KernelCtx&, float*,
                                              const RowStats<float>&, ScratchCarver&);
template void forward_gradients<double, double>(const LossAttrs&, const Rows&, KernelCtx&, double*,
                                                const RowStats<double>&, ScratchCarver&);
template void forward_gradients<BFloat16, float>(const LossAttrs&, const Rows&, KernelCtx&, float*,
                                                 const RowStats<float>&, ScratchCarver&);

}  // namespace onnxtrain::kernels::lce
