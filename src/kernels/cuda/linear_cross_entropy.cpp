// The CUDA kernels of the fused head (ops/linear_cross_entropy.cpp): com.onnxtrain.LinearCrossEntropy, its gradient
// LinearCrossEntropyGrad and LinearGradAdd, on matmul.cu's GEMM and cross_entropy.cu's row kernels. A first version
// for correctness: the (N, C) scores (float32) and, for the gradients, their gradient (in X's dtype) are held whole
// in scratch, where the CPU's kernel goes by blocks; the targets stay on the device (one out of range gives a NaN
// loss, not an error).
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/product.h"
#include "ops/loss.h"

namespace onnxtrain::kernels::cuda {
namespace {

using ops::LinearGradAddAttrs;
using ops::LossAttrs;

// The head's sizes: X (n, k) as rows, W (c, k), B (c)?, n targets; checked.
struct Head {
  int64_t n = 0, k = 0, c = 0;
  DType t = DType::kFloat32;
};
Head head_of(const KernelCtx& ctx, size_t x, size_t w, size_t b, size_t target) {
  const Tensor &X = ctx.in(x), &W = ctx.in(w);
  Head h{0, X.dims().back(), W.rank() == 2 ? W.dims()[0] : -1, X.dtype()};
  h.n = h.k ? X.numel() / h.k : numel_of(std::vector<int64_t>(X.dims().begin(), X.dims().end() - 1));
  if (h.c < 0 || W.dims()[1] != h.k || (ctx.has(b) && ctx.in(b).numel() != h.c) ||
      (target != size_t(-1) && ctx.in(target).numel() != h.n))
    ctx.fail("X " + dims_str(X.dims()) + ", W " + dims_str(W.dims()) +
             (ctx.has(b) ? ", B " + dims_str(ctx.in(b).dims()) : "") + " and the targets do not fit together");
  for (size_t i : {w, b})
    if (ctx.has(i) && ctx.in(i).dtype() != h.t) ctx.fail("X, W and B must have one dtype");
  return h;
}

CrossEntropy cross_entropy_of(const LossAttrs& a, const KernelCtx& c, const Head& h, size_t target) {
  CrossEntropy e;
  e.n = h.n, e.c = h.c;
  e.target_type = c.in(target).dtype();
  e.target = c.in(target).raw();
  e.has_ignore = a.has_ignore, e.ignore = a.ignore_index;
  return e;
}

// s (n, c) float32 = X W^T + B.
void scores(const KernelCtx& c, const Head& h, size_t x, size_t w, size_t b, float* s) {
  product(h.t, DType::kFloat32, c.in(x).raw(), h.k, 1, c.in(w).raw(), 1, h.k, h.n, h.c, h.k,
          c.has(b) ? c.in(b).raw() : nullptr, 0, s);
}

// dX = G W, dW = G^T X and dB = G's column sums, each into output first + 0, 1, 2 where asked for.
void head_gradients(KernelCtx& c, const Head& h, const void* g, size_t x, size_t w, size_t first) {
  if (c.wants(first))
    product(h.t, h.t, g, h.c, 1, c.in(w).raw(), h.k, 1, h.n, h.k, h.c, nullptr, 0, c.out(first).raw());
  if (c.wants(first + 1))
    product(h.t, h.t, g, 1, h.c, c.in(x).raw(), h.k, 1, h.c, h.k, h.n, nullptr, 0, c.out(first + 1).raw());
  if (c.wants(first + 2)) column_sums(h.t, g, h.n, h.c, nullptr, c.out(first + 2).raw(), stream());
}

void check_float32(const KernelCtx& c, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kFloat32)
    throw UnsupportedError(c.node.where() + ": the CUDA kernel takes " + what + " in float32, not " +
                           dtype_name(t.dtype()));
}

void linear_cross_entropy(const LossAttrs& a, KernelCtx& c) {
  const Head h = head_of(c, 0, 1, 2, 3);
  const bool grads = c.wants(2) || c.wants(3) || c.wants(4);
  if (grads && a.reduction == LossAttrs::kNone) c.fail("gradients in forward need a loss of one number");
  check_float32(c, c.out(0), "the loss");
  const CrossEntropy e = cross_entropy_of(a, c, h, 3);
  ScratchCarver scratch{c};
  float* s = scratch.take<float>(h.n * h.c);
  float* lse = c.wants(1) ? c.out(1).data<float>() : scratch.take<float>(h.n);
  double* totals = scratch.take<double>(2);
  zero(totals, 2 * sizeof(double));
  scores(c, h, 0, 1, 2, s);
  if (c.wants(5)) cast(DType::kFloat32, h.t, s, c.out(5).raw(), h.n * h.c, stream());
  float* loss = c.out(0).data<float>();
  cross_entropy_rows(e, s, lse, a.reduction == LossAttrs::kNone ? loss : nullptr, totals, stream());
  if (a.reduction != LossAttrs::kNone) cross_entropy_total(a.reduction == LossAttrs::kMean, totals, loss, stream());
  if (!grads) return;
  void* g = scratch.take<uint8_t>(h.n * h.c * int64_t(dtype_size(h.t)));
  cross_entropy_grad(e, h.t, s, lse, nullptr, false, a.reduction == LossAttrs::kMean, totals, g, stream());
  head_gradients(c, h, g, 0, 1, 2);
}

void linear_cross_entropy_grad(const LossAttrs& a, KernelCtx& c) {
  const Head h = head_of(c, 1, 2, 3, 4);
  check_float32(c, c.in(0), "the loss's gradient");
  check_float32(c, c.in(5), "the log-sum-exps");
  const bool per_row = a.reduction == LossAttrs::kNone;
  if (c.in(0).numel() != (per_row ? h.n : 1) || c.in(5).numel() != h.n)
    c.fail("dloss " + dims_str(c.in(0).dims()) + " or lse " + dims_str(c.in(5).dims()) + " does not fit the rows");
  const CrossEntropy e = cross_entropy_of(a, c, h, 4);
  ScratchCarver scratch{c};
  float* s = scratch.take<float>(h.n * h.c);
  double* totals = scratch.take<double>(2);
  void* g = scratch.take<uint8_t>(h.n * h.c * int64_t(dtype_size(h.t)));
  zero(totals, 2 * sizeof(double));
  if (a.reduction == LossAttrs::kMean) count_targets(e, totals, stream());
  scores(c, h, 1, 2, 3, s);
  cross_entropy_grad(e, h.t, s, c.in(5).data<float>(), c.in(0).data<float>(), per_row,
                     a.reduction == LossAttrs::kMean, totals, g, stream());
  head_gradients(c, h, g, 1, 2, 0);
}

void linear_grad_add(const LinearGradAddAttrs& a, KernelCtx& c) {
  const Head h = head_of(c, 1, 2, size_t(-1), size_t(-1));
  Tensor& out = c.out(0);
  if ((c.has(0) && (c.in(0).numel() != h.n * h.c || c.in(0).dtype() != h.t)) ||
      (c.has(3) && (c.in(3).numel() != out.numel() || c.in(3).dtype() != out.dtype())))
    c.fail("dY " + (c.has(0) ? dims_str(c.in(0).dims()) : std::string("(unset)")) + " or the base does not fit X " +
           dims_str(c.in(1).dims()) + " and W " + dims_str(c.in(2).dims()));
  const void* base = c.has(3) ? c.in(3).raw() : nullptr;
  if (!c.has(0) || h.n == 0) return base ? copy(c.in(3), out) : zero(out.raw(), out.nbytes());  // the base, as it is
  const void* dy = c.in(0).raw();
  if (a.wrt == LinearGradAddAttrs::kX)
    product(h.t, h.t, dy, h.c, 1, c.in(2).raw(), h.k, 1, h.n, h.k, h.c, base, h.k, out.raw());
  if (a.wrt == LinearGradAddAttrs::kW)
    product(h.t, h.t, dy, 1, h.c, c.in(1).raw(), h.k, 1, h.c, h.k, h.n, base, h.k, out.raw());
  if (a.wrt == LinearGradAddAttrs::kB) column_sums(h.t, dy, h.n, h.c, base, out.raw(), stream());
}

Dim span_of(const Dim& elements, int64_t bytes) { return scratch_span(elements * Dim(bytes)); }

// The scores (float32), their gradient (X's dtype) when gradients are formed, the totals, and forward's
// log-sum-exps when output 1 is not asked for.
Dim head_scratch(ops::InferCtx& s, size_t x, size_t w, bool grads, bool lse) {
  const Shape& xs = s.shape(x);
  const Dim rows = shape_numel(Shape(xs.begin(), xs.end() - 1)), cells = rows * s.shape(w)[0];
  Dim r = span_of(cells, 4) + span_of(Dim(2), 8);
  if (grads) r = r + span_of(cells, int64_t(dtype_size(s.dtype(x))));
  if (lse) r = r + span_of(rows, 4);
  return r;
}

Dim forward_scratch(const ops::Op&, ops::InferCtx& s) {
  const auto& outs = s.node().outputs;
  bool grads = false;
  for (size_t i = 2; i < std::min<size_t>(5, outs.size()); ++i) grads = grads || outs[i];
  return head_scratch(s, 0, 1, grads, outs.size() < 2 || !outs[1]);
}

Dim backward_scratch(const ops::Op&, ops::InferCtx& s) { return head_scratch(s, 1, 2, true, false); }

const bool kRegistered = register_kernels(
    cuda_device(0),
    {{"com.onnxtrain", "LinearCrossEntropy", kernel<LossAttrs>(linear_cross_entropy), forward_scratch},
     {"com.onnxtrain", "LinearCrossEntropyGrad", kernel<LossAttrs>(linear_cross_entropy_grad), backward_scratch},
     {"com.onnxtrain", "LinearGradAdd", kernel<LinearGradAddAttrs>(linear_grad_add)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
