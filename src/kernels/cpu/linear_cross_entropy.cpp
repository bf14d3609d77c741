// com.onnxtrain.LinearCrossEntropy and LinearCrossEntropyGrad (ops/linear_cross_entropy.cpp) on the CPU, in
// float32 and float64, and in bfloat16 (the scores rounded to bf16 as autocast's Linear writes them, loss and
// log-sum-exps in float32 from them, bf16 GEMMs) where the CPU has bf16 dot products (elsewhere through float32
// copies, the scores rounded alike). Forward: blocks of classes whose scores (N, columns) fill at
// most 8 MiB of scratch, one GEMM per block, keeping each row's log-sum-exp as a running maximum and sum, writing
// the scores to output 5 (in bf16 for a bf16 head) when the graph keeps them, and a frozen head's dX in the
// same pass (lce::loss_pass); the other gradients it forms for a loss of one number come after, a block of classes
// at a time (forward_gradients). Backward (a loss per row) computes blocks of rows' scores (rows, C) of at most
// 8 MiB again, turns them into their gradient in place and multiplies it into dX, dW and dB.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/linear_cross_entropy.h"
#include "kernels/kernel.h"
#include "ops/loss.h"

namespace onnxtrain::kernels {
namespace {

using lce::Rows;
using lce::ignored;
using lce::mean_scale;
using lce::kBlockBytes;
using lce::kMaxRows;

using ops::LossAttrs;

// Rows per block for scores of `elem` bytes each.
int64_t block_rows(int64_t classes, size_t elem) {
  return std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(1, classes * int64_t(elem)), 1, kMaxRows);
}

// The sizes of one call, checked (Rows).
Rows rows(const LossAttrs& a, const KernelCtx& ctx, size_t x, size_t w, size_t b, size_t target) {
  Rows r;
  const auto &xd = ctx.in(x).dims(), &wd = ctx.in(w).dims();
  r.k = xd.back();
  r.c = wd[0];
  r.n = r.k ? ctx.in(x).numel() / r.k : numel_of(std::vector<int64_t>(xd.begin(), xd.end() - 1));
  if (wd.size() != 2 || wd[1] != r.k || (ctx.has(b) && ctx.in(b).numel() != r.c) || ctx.in(target).numel() != r.n)
    ctx.fail("X " + dims_str(xd) + ", W " + dims_str(wd) + (ctx.has(b) ? ", B " + dims_str(ctx.in(b).dims()) : "") +
             " and target " + dims_str(ctx.in(target).dims()) + " do not fit together");
  const ir::Value* declared = x < ctx.node.inputs.size() ? ctx.node.inputs[x] : nullptr;
  for (DType t : {ctx.in(x).dtype(), declared ? declared->dtype : DType::kFloat32})
    if (dtype_is_16bit_float(t)) r.rounded = t;
  r.target = ctx.in(target).to_int64();
  for (int64_t t : r.target) {
    if (a.has_ignore && t == a.ignore_index) continue;
    if (t < 0 || t >= r.c)
      ctx.fail("label " + std::to_string(t) + " is out of range for " + std::to_string(r.c) + " classes");
    ++r.valid;
  }
  return r;
}

// Where the gradients go: dX, dW, dB of S (each null when not asked for), and in bfloat16 the scratch they are
// formed in (each block's gradient rounded to bf16, as autocast's Cast backward rounds it, for the GEMMs; dW and
// dB summed over the blocks in float32 and rounded once, by finish()).
template <typename S>
struct Gradients {
  S *dx = nullptr, *dw = nullptr, *db = nullptr;
  BFloat16* g = nullptr;
  float *dw32 = nullptr, *db32 = nullptr;

  Gradients(KernelCtx& c, size_t first, const Rows& r, ScratchCarver& scratch, int64_t block) {
    dx = c.wants(first) ? c.out(first).data<S>() : nullptr;
    dw = c.wants(first + 1) ? c.out(first + 1).data<S>() : nullptr;
    db = c.wants(first + 2) ? c.out(first + 2).data<S>() : nullptr;
    if constexpr (std::is_same_v<S, BFloat16>) {
      if (!any()) return;
      g = scratch.take<BFloat16>(block * r.c);
      dw32 = dw ? scratch.take<float>(r.c * r.k) : nullptr;
      db32 = db ? scratch.take<float>(r.c) : nullptr;
      if (dw32 && r.n == 0) std::fill(dw32, dw32 + r.c * r.k, 0.f);
      if (db32) std::fill(db32, db32 + r.c, 0.f);
    } else {
      if (dw && r.n == 0) std::fill(dw, dw + r.c * r.k, S(0));
      if (db) std::fill(db, db + r.c, S(0));
    }
  }
  bool any() const { return dx || dw || db; }

  // Adds the gradient of rows [r0, r0 + m), the block's score gradients in s, to dX (its rows), dW and dB.
  template <typename A>
  void add(const Rows& r, const S* x, const S* w, int64_t r0, int64_t m, A* s) {
    if constexpr (std::is_same_v<S, BFloat16>) {
      from_f32(s, g, m * r.c);
      if (dx) gemm_bf16(1, m, r.k, r.c, {g, r.c}, {w, r.k}, dx + r0 * r.k);
      if (dw32) gemm_bf16(1, r.c, r.k, m, {g, r.c, 0, true}, {x + r0 * r.k, r.k}, dw32, 1, nullptr, r0 > 0);
    } else {
      if (dx) gemm<S>(false, false, m, r.k, r.c, S(1), s, r.c, w, r.k, S(0), dx + r0 * r.k, r.k);
      if (dw) gemm<S>(true, false, r.c, r.k, m, S(1), s, r.c, x + r0 * r.k, r.k, S(r0 ? 1 : 0), dw, r.k);
    }
    A* sums = nullptr;
    if constexpr (std::is_same_v<S, BFloat16>)
      sums = db32;
    else
      sums = db;
    if (sums)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < r.c; ++j) sums[j] += s[i * r.c + j];
  }

  void finish(const Rows& r) {
    if constexpr (std::is_same_v<S, BFloat16>) {
      if (dw32) from_f32(dw32, dw, r.c * r.k);
      if (db32) from_f32(db32, db, r.c);
    }
  }
};

// Forward on X, W, B of S, computing in A (S itself, or float32 for bfloat16): the loss pass over blocks of classes
// gives each row's log-sum-exp and loss, writes the scores (output 5, in S) when asked for, and a frozen head's dX;
// the other gradients of outputs 2-4 (reductions "mean" and "sum": backward only scales them by the loss's
// gradient instead of computing the scores again) come after, by forward_gradients.
template <typename S, typename A>
void forward(const LossAttrs& a, const Rows& r, KernelCtx& c) {
  const bool grads = c.wants(2) || c.wants(3) || c.wants(4), frozen = c.wants(2) && !c.wants(3) && !c.wants(4);
  if (grads && a.reduction == LossAttrs::kNone) c.fail("gradients in forward need a loss of one number");
  ScratchCarver scratch{c};
  A* s = scratch.take<A>(r.n * lce::column_width(r.n, r.c, sizeof(A)));
  const lce::RowStats<A> stats{scratch.take<A>(r.n), scratch.take<A>(r.n), scratch.take<A>(r.n)};
  A* row_loss = scratch.take<A>(r.n);
  lce::loss_pass<S, A>(a, r, c, s, stats, row_loss, frozen, scratch);
  if (c.wants(1)) {
    A* lse = c.out(1).data<A>();
    for (int64_t i = 0; i < r.n; ++i) lse[i] = stats.max[i] + stats.log_sum[i];
  }
  A* loss = c.out(0).data<A>();
  double total = 0;
  for (int64_t i = 0; i < r.n; ++i) {
    if (a.reduction == LossAttrs::kNone) loss[i] = row_loss[i];
    total += double(row_loss[i]);
  }
  if (a.reduction == LossAttrs::kSum) loss[0] = A(total);
  if (a.reduction == LossAttrs::kMean) loss[0] = A(r.valid ? total / double(r.valid) : 0.0);
  if (grads && !frozen) lce::forward_gradients<S, A>(a, r, c, s, stats, scratch);
}

void linear_cross_entropy(const LossAttrs& a, KernelCtx& c) {
  const Rows r = rows(a, c, 0, 1, 2, 3);
  if (c.in(0).dtype() == DType::kBFloat16) return forward<BFloat16, float>(a, r, c);
  dispatch<kWideFloats>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward<T, T>(a, r, c);
  });
}

// Backward on dloss, X, W, B of S: each block's scores computed again, whole rows, and turned into their gradient
// from their own maximum and sums (lse, input 5, is for the CUDA kernel: the CPU's blocks hold whole rows, whose
// statistics keep more precision than one float32 log-sum-exp: lce::RowStats).
template <typename S, typename A>
void backward(const LossAttrs& a, const Rows& r, KernelCtx& c) {
  const A* dloss = c.in(0).data<A>();
  const S *x = c.in(1).data<S>(), *w = c.in(2).data<S>(), *b = c.has(3) ? c.in(3).data<S>() : nullptr;
  const int64_t block = block_rows(r.c, sizeof(A));
  ScratchCarver scratch{c};
  A* s = scratch.take<A>(block * r.c);
  Gradients<S> grads(c, 0, r, scratch, block);
  for (int64_t r0 = 0; r0 < r.n; r0 += block) {
    const int64_t m = std::min(block, r.n - r0);
    const lce::Block block{r0, m, 0, r.c};
    lce::block_scores(r, x, w, b, block, s);
    lce::block_gradients<A>(a, r, dloss, mean_scale<A>(a, r), nullptr, block, s);
    grads.add(r, x, w, r0, m, s);
  }
  grads.finish(r);
}

void linear_cross_entropy_grad(const LossAttrs& a, KernelCtx& c) {
  const Rows r = rows(a, c, 1, 2, 3, 4);
  if (c.in(5).numel() != r.n) c.fail("lse " + dims_str(c.in(5).dims()) + " must hold one number per row");
  const int64_t dloss_count = a.reduction == LossAttrs::kNone ? r.n : 1;
  if (c.in(0).numel() != dloss_count) c.fail("dloss " + dims_str(c.in(0).dims()) + " must be the loss's shape");
  if (c.in(1).dtype() == DType::kBFloat16) return backward<BFloat16, float>(a, r, c);
  dispatch<kWideFloats>(c.in(1).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward<T, T>(a, r, c);
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

// What the gradients of W (C, K) in `w`'s dtype take beyond a block: in bfloat16 the block's bf16 gradient and
// float32 sums of dW and dB (Gradients), nothing else.
Dim gradient_scratch(ops::InferCtx& s, size_t w) {
  if (s.dtype(w) != DType::kBFloat16) return Dim(0);
  const Shape& ws = s.shape(w);
  return scratch_span(Dim::ceil_div(block_scratch(s, w), Dim(2))) + scratch_span(shape_numel(ws) * Dim(4)) +
         ws[0] * Dim(4);
}

// Forward: a (rows, column_width) block of scores, each row's statistics (lce::RowStats) and loss, and for bfloat16
// gradients a bf16 copy of the block and a float32 dX.
Dim forward_scratch(const ops::Op&, ops::InferCtx& s) {
  const auto& outs = s.node().outputs;
  const Shape& x = s.shape(0);
  const Dim rows = shape_numel(Shape(x.begin(), x.end() - 1)), classes = s.shape(1)[0];
  const int64_t elem = score_bytes(s.dtype(1));
  bool grads = false;
  for (size_t i = 2; i < std::min<size_t>(5, outs.size()); ++i) grads = grads || outs[i];
  // (column_width's block: within max(8 MiB, 256 columns), and no wider than all C)
  const Dim columns = Dim::min(Dim::max(Dim(kBlockBytes), rows * Dim(256 * elem)), rows * classes * Dim(elem));
  Dim r = scratch_span(columns) + scratch_span(rows * Dim(elem)) * Dim(4);
  if (grads && s.dtype(1) == DType::kBFloat16)
    r = r + scratch_span(Dim::ceil_div(columns, Dim(2))) + scratch_span(rows * x.back() * Dim(4));
  return r;
}

// Backward: a block and the gradients' scratch.
Dim backward_scratch(const ops::Op&, ops::InferCtx& s) {
  return scratch_span(block_scratch(s, 2)) + gradient_scratch(s, 2);
}

const bool kRegistered = register_kernels(
    kCpu, {in_float32({"com.onnxtrain", "LinearCrossEntropy", kernel<LossAttrs>(linear_cross_entropy), forward_scratch},
                      gemm_bf16_native),
           in_float32({"com.onnxtrain", "LinearCrossEntropyGrad", kernel<LossAttrs>(linear_cross_entropy_grad),
                       backward_scratch},
                      gemm_bf16_native)});

}  // namespace
}  // namespace onnxtrain::kernels
