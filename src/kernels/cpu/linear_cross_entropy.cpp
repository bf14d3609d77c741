// com.onnxtrain.LinearCrossEntropy and LinearCrossEntropyGrad (ops/linear_cross_entropy.cpp) on the CPU, in
// float32 and float64, and in bfloat16 (float32 scores, loss and log-sum-exps from bf16 GEMMs) where the CPU has
// bf16 dot products (elsewhere through float32 copies): blocks of rows whose scores (rows, C) fill at most 8 MiB of
// scratch (at most 256 rows), one GEMM per block; forward keeps each row's log-sum-exp, backward computes the
// block's scores again, turns them into their gradient in place and multiplies it into dX, dW and dB.
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"
#include "ops/loss.h"

namespace onnxtrain::kernels {
namespace {

using ops::LossAttrs;

constexpr int64_t kBlockBytes = int64_t(1) << 23, kMaxRows = 256;

// Rows per block for scores of `elem` bytes each.
int64_t block_rows(int64_t classes, size_t elem) {
  return std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(1, classes * int64_t(elem)), 1, kMaxRows);
}

// Sizes of one call, checked: X (n, k) as rows, W (c, k), B (c)?, the targets (n) each a class or ignored.
struct Rows {
  int64_t n = 0, k = 0, c = 0;
  std::vector<int64_t> target;
  int64_t valid = 0;  // targets not ignored
};

Rows rows(const LossAttrs& a, const KernelCtx& ctx, size_t x, size_t w, size_t b, size_t target) {
  Rows r;
  const auto &xd = ctx.in(x).dims(), &wd = ctx.in(w).dims();
  r.k = xd.back();
  r.c = wd[0];
  r.n = r.k ? ctx.in(x).numel() / r.k : numel_of(std::vector<int64_t>(xd.begin(), xd.end() - 1));
  if (wd.size() != 2 || wd[1] != r.k || (ctx.has(b) && ctx.in(b).numel() != r.c) || ctx.in(target).numel() != r.n)
    ctx.fail("X " + dims_str(xd) + ", W " + dims_str(wd) + (ctx.has(b) ? ", B " + dims_str(ctx.in(b).dims()) : "") +
             " and target " + dims_str(ctx.in(target).dims()) + " do not fit together");
  r.target = ctx.in(target).to_int64();
  for (int64_t t : r.target) {
    if (a.has_ignore && t == a.ignore_index) continue;
    if (t < 0 || t >= r.c)
      ctx.fail("label " + std::to_string(t) + " is out of range for " + std::to_string(r.c) + " classes");
    ++r.valid;
  }
  return r;
}

bool ignored(const LossAttrs& a, int64_t t) { return a.has_ignore && t == a.ignore_index; }

// s (m, c) = the scores of rows [r0, r0 + m): X W^T + B.
template <typename T>
void scores(const Rows& r, const T* x, const T* w, const T* b, int64_t r0, int64_t m, T* s) {
  gemm<T>(false, true, m, r.c, r.k, T(1), x + r0 * r.k, r.k, w, r.k, T(0), s, r.c);
  if (b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < r.c; ++j) s[i * r.c + j] += b[j];
}

// In bfloat16, the scores in float32 (autocast's head rounds them to bf16 before its float32 loss: these are the
// more precise).
void scores(const Rows& r, const BFloat16* x, const BFloat16* w, const BFloat16* b, int64_t r0, int64_t m, float* s) {
  gemm_bf16(1, m, r.c, r.k, {x + r0 * r.k, r.k}, {w, r.k, 0, true}, s, 1, b);
}

template <typename T>
T log_sum_exp(const T* row, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return log_sum_exp_f32(row, n);
  } else {
    T m = *std::max_element(row, row + n);
    if (!std::isfinite(m)) return m;
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - m);
    return m + std::log(sum);
  }
}

// Forward on X, W, B of S, computing in A (S itself, or float32 for bfloat16).
template <typename S, typename A>
void forward(const LossAttrs& a, const Rows& r, KernelCtx& c) {
  const S *x = c.in(0).data<S>(), *w = c.in(1).data<S>(), *b = c.has(2) ? c.in(2).data<S>() : nullptr;
  const int64_t block = block_rows(r.c, sizeof(A));
  A* s = c.scratch_as<A>(0, size_t(block * r.c));
  A* loss = c.out(0).data<A>();
  A* lse = c.wants(1) ? c.out(1).data<A>() : c.scratch_as<A>(size_t(block * r.c) * sizeof(A), size_t(r.n));
  double total = 0;
  for (int64_t r0 = 0; r0 < r.n; r0 += block) {
    const int64_t m = std::min(block, r.n - r0);
    scores(r, x, w, b, r0, m, s);
    parallel_for(m, r.c * 4, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) lse[r0 + i] = log_sum_exp(s + i * r.c, r.c);
    });
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = r.target[size_t(r0 + i)];
      const A per = ignored(a, t) ? A(0) : lse[r0 + i] - s[i * r.c + t];
      if (a.reduction == LossAttrs::kNone) loss[r0 + i] = per;
      total += double(per);
    }
  }
  if (a.reduction == LossAttrs::kSum) loss[0] = A(total);
  if (a.reduction == LossAttrs::kMean) loss[0] = A(r.valid ? total / double(r.valid) : 0.0);
}

void linear_cross_entropy(const LossAttrs& a, KernelCtx& c) {
  const Rows r = rows(a, c, 0, 1, 2, 3);
  if (c.in(0).dtype() == DType::kBFloat16) return forward<BFloat16, float>(a, r, c);
  dispatch<kWideFloats>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward<T, T>(a, r, c);
  });
}

// The scores of rows [r0, r0 + m) in s turned into their gradient: per * (softmax - onehot(target)), 0 for an
// ignored target (per: dloss, times 1 / valid for "mean").
template <typename T>
void score_gradients(const LossAttrs& a, const Rows& r, const T* dloss, T scale, const T* lse, int64_t r0, int64_t m,
                     T* s) {
  parallel_for(m, r.c * 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = r.target[size_t(r0 + i)];
      T* row = s + i * r.c;
      if (ignored(a, t)) {
        std::fill(row, row + r.c, T(0));
        continue;
      }
      const T per = dloss[a.reduction == LossAttrs::kNone ? r0 + i : 0] * scale, l = lse[r0 + i];
      for (int64_t j = 0; j < r.c; ++j) row[j] -= l;
      if constexpr (std::is_same_v<T, float>) {
        exp_f32(row, row, r.c);
      } else {
        for (int64_t j = 0; j < r.c; ++j) row[j] = std::exp(row[j]);
      }
      for (int64_t j = 0; j < r.c; ++j) row[j] *= per;
      row[t] -= per;
    }
  });
}

template <typename T>
T mean_scale(const LossAttrs& a, const Rows& r) {
  return a.reduction == LossAttrs::kMean ? T(r.valid ? 1.0 / double(r.valid) : 0.0) : T(1);
}

// Backward in bfloat16: each block's gradient rounded to bf16 (as autocast's Cast backward rounds it) for the
// GEMMs; dW and dB summed over the blocks in float32 and rounded once.
void backward_bf16(const LossAttrs& a, const Rows& r, KernelCtx& c) {
  const float *dloss = c.in(0).data<float>(), *lse = c.in(5).data<float>();
  const BFloat16 *x = c.in(1).data<BFloat16>(), *w = c.in(2).data<BFloat16>();
  const BFloat16* b = c.has(3) ? c.in(3).data<BFloat16>() : nullptr;
  BFloat16* dx = c.wants(0) ? c.out(0).data<BFloat16>() : nullptr;
  const int64_t block = block_rows(r.c, sizeof(float));
  ScratchCarver scratch{c};
  float* s = scratch.take<float>(block * r.c);
  BFloat16* g = scratch.take<BFloat16>(block * r.c);
  float* dw = c.wants(1) ? scratch.take<float>(r.c * r.k) : nullptr;
  float* db = c.wants(2) ? scratch.take<float>(r.c) : nullptr;
  if (dw && r.n == 0) std::fill(dw, dw + r.c * r.k, 0.f);
  if (db) std::fill(db, db + r.c, 0.f);
  for (int64_t r0 = 0; r0 < r.n; r0 += block) {
    const int64_t m = std::min(block, r.n - r0);
    scores(r, x, w, b, r0, m, s);
    score_gradients(a, r, dloss, mean_scale<float>(a, r), lse, r0, m, s);
    from_f32(s, g, m * r.c);
    if (dx) gemm_bf16(1, m, r.k, r.c, {g, r.c}, {w, r.k}, dx + r0 * r.k);
    if (dw) gemm_bf16(1, r.c, r.k, m, {g, r.c, 0, true}, {x + r0 * r.k, r.k}, dw, 1, nullptr, r0 > 0);
    if (db)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < r.c; ++j) db[j] += s[i * r.c + j];
  }
  if (dw) from_f32(dw, c.out(1).data<BFloat16>(), r.c * r.k);
  if (db) from_f32(db, c.out(2).data<BFloat16>(), r.c);
}

void linear_cross_entropy_grad(const LossAttrs& a, KernelCtx& c) {
  const Rows r = rows(a, c, 1, 2, 3, 4);
  if (c.in(5).numel() != r.n) c.fail("lse " + dims_str(c.in(5).dims()) + " must hold one number per row");
  const int64_t dloss_count = a.reduction == LossAttrs::kNone ? r.n : 1;
  if (c.in(0).numel() != dloss_count) c.fail("dloss " + dims_str(c.in(0).dims()) + " must be the loss's shape");
  if (c.in(1).dtype() == DType::kBFloat16) return backward_bf16(a, r, c);
  dispatch<kWideFloats>(c.in(1).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *dloss = c.in(0).data<T>(), *x = c.in(1).data<T>(), *w = c.in(2).data<T>();
    const T *b = c.has(3) ? c.in(3).data<T>() : nullptr, *lse = c.in(5).data<T>();
    T* dx = c.wants(0) ? c.out(0).data<T>() : nullptr;
    T* dw = c.wants(1) ? c.out(1).data<T>() : nullptr;
    T* db = c.wants(2) ? c.out(2).data<T>() : nullptr;
    if (db) std::fill(db, db + r.c, T(0));
    const int64_t block = block_rows(r.c, sizeof(T));
    T* s = c.scratch_as<T>(0, size_t(block * r.c));
    for (int64_t r0 = 0; r0 < r.n; r0 += block) {
      const int64_t m = std::min(block, r.n - r0);
      scores(r, x, w, b, r0, m, s);
      score_gradients(a, r, dloss, mean_scale<T>(a, r), lse, r0, m, s);
      if (dx) gemm<T>(false, false, m, r.k, r.c, T(1), s, r.c, w, r.k, T(0), dx + r0 * r.k, r.k);
      if (dw) gemm<T>(true, false, r.c, r.k, m, T(1), s, r.c, x + r0 * r.k, r.k, T(r0 ? 1 : 0), dw, r.k);
      if (db)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < r.c; ++j) db[j] += s[i * r.c + j];
    }
    if (dw && r.n == 0) std::fill(dw, dw + r.c * r.k, T(0));
  });
}

// The bytes of a score: float32 for bfloat16 weights, else theirs.
int64_t score_bytes(DType w) { return w == DType::kBFloat16 ? 4 : int64_t(dtype_size(w)); }

// One block of scores: rows as many as fit 8 MiB (at most 256), for W (C, K) of a known C.
Dim block_scratch(ops::InferCtx& s, size_t w) {
  const Dim classes = s.shape(w)[0];
  const int64_t elem = score_bytes(s.dtype(w));
  if (!classes.is_const()) return classes * Dim(kMaxRows * elem);
  return Dim(block_rows(classes.value(), size_t(elem)) * classes.value() * elem);
}

// Forward: a block, and each row's log-sum-exp when output 1 is not asked for.
Dim forward_scratch(const ops::Op&, ops::InferCtx& s) {
  const auto& outs = s.node().outputs;
  if (outs.size() > 1 && outs[1]) return block_scratch(s, 1);
  const Shape& x = s.shape(0);
  return block_scratch(s, 1) + shape_numel(Shape(x.begin(), x.end() - 1)) * Dim(score_bytes(s.dtype(0)));
}

// Backward: a block; in bfloat16 also the block's bf16 gradient and float32 sums of dW and dB.
Dim backward_scratch(const ops::Op&, ops::InferCtx& s) {
  Dim block = block_scratch(s, 2);
  if (s.dtype(2) != DType::kBFloat16) return block;
  const Shape& w = s.shape(2);
  return scratch_span(block) + scratch_span(Dim::ceil_div(block, Dim(2))) + scratch_span(shape_numel(w) * Dim(4)) +
         w[0] * Dim(4);
}

const bool kRegistered = register_kernels(
    kCpu, {in_float32({"com.onnxtrain", "LinearCrossEntropy", kernel<LossAttrs>(linear_cross_entropy), forward_scratch},
                      gemm_bf16_native),
           in_float32({"com.onnxtrain", "LinearCrossEntropyGrad", kernel<LossAttrs>(linear_cross_entropy_grad),
                       backward_scratch},
                      gemm_bf16_native)});

}  // namespace
}  // namespace onnxtrain::kernels
