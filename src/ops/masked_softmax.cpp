// Attention's masked softmax, fused:
// com.onnxtrain.MaskedSoftmax(X, scale, cond, fill) = Softmax(Where(cond, fill, X * scale)) along the last axis,
// scale and fill scalars, cond broadcast to X: scale, mask and softmax in one pass over the scores (three
// before); the masked_softmax_fusion pass makes it.
// com.onnxtrain.AttentionSoftmax(A, B, scale, cond, fill) = MaskedSoftmax(MatMul(A, B), scale, cond, fill): the
// scores' product computed only for the columns some row of a 32-row tile leaves unmasked (a causal mask:
// ~60% of the product), then the masked softmax; the attention_softmax_fusion pass makes it.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vector_math.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

// y = MaskedSoftmax(x, scale, cond, fill) over the last axis (y may be x).
void masked_softmax(ComputeCtx& c, const Tensor& x, const Tensor& scale_t, const Tensor& cond, const Tensor& fill_t, Tensor& out) {
  if (scale_t.numel() != 1 || fill_t.numel() != 1) c.fail("scale and fill must be scalars");
  std::vector<int64_t> bd;
  if (!kernels::broadcast_dims(x.dims(), cond.dims(), &bd) || bd != x.dims())
    c.fail("cond " + dims_str(cond.dims()) + " does not broadcast to the scores " + dims_str(x.dims()));
  kernels::dispatch<kernels::kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *xp = x.data<T>(), scale = scale_t.data<T>()[0], fill = fill_t.data<T>()[0];
    const bool* cp = cond.data<bool>();
    T* y = out.data<T>();
    kernels::broadcast_rows<2>(x.dims(), {&x.dims(), &cond.dims()}, [&](int64_t o, auto off, auto st, int64_t n) {
      T* row = y + o;
      const T* xr = xp + off[0];
      const bool* cr = cp + off[1];
      if constexpr (std::is_same_v<T, float>) {
        if (st[0] == 1 && st[1] == 1) return kernels::masked_softmax_f32(xr, cr, scale, fill, row, n);  // the usual case
        for (int64_t k = 0; k < n; ++k) row[k] = cr[k * st[1]] ? fill : xr[k * st[0]] * scale;
        kernels::softmax_f32(row, row, n);
      } else {
        T m = -INFINITY, sum = 0;
        for (int64_t k = 0; k < n; ++k) m = std::max(m, row[k] = cr[k * st[1]] ? fill : xr[k * st[0]] * scale);
        for (int64_t k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - m));
        for (int64_t k = 0; k < n; ++k) row[k] /= sum;
      }
    });
  });
}

// The gradient with respect to the scores: com.onnxtrain.MaskedSoftmaxGrad(dY, Y, scale, cond).
ir::Value* scores_grad(GradCtx& g, size_t scale, size_t cond) {
  if (g.needs(scale) || g.needs(scale + 2)) no_gradient(g);
  return g.ops("MaskedSoftmaxGrad", {g.dy(0), g.y(0), g.x(scale), g.x(cond)}, 1, {}, "com.onnxtrain")[0];
}

class MaskedSoftmaxOp : public Op {
 public:
  explicit MaskedSoftmaxOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(8) : Dim(0);
  }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) < 1) ctx.fail("X must have a rank of at least 1");
    if (ctx.rank(2) > ctx.rank(0)) ctx.fail("cond " + shape_str(ctx.shape(2)) + " has a higher rank than X " + shape_str(ctx.shape(0)));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
  }
  void compute(ComputeCtx& c) const override { masked_softmax(c, c.in(0), c.in(1), c.in(2), c.in(3), c.out(0)); }
  void grad(GradCtx& g) const override {
    if (g.needs(0) || g.needs(1) || g.needs(3)) g.set_dx(0, scores_grad(g, 1, 2));
  }
};
const bool kMaskedSoftmaxRegistered = register_op("com.onnxtrain", "MaskedSoftmax", factory<MaskedSoftmaxOp>());

// com.onnxtrain.MaskedSoftmaxGrad(dY, Y, scale, cond) = Where(cond, 0, Y (dY - sum(dY Y))) * scale, sums along
// the last axis: what the six ops it stands for (the softmax's gradient, the mask, the scale) computed in six
// passes over the scores, in one.
class MaskedSoftmaxGradOp : public Op {
 public:
  explicit MaskedSoftmaxGradOp(const ir::Node&) {}
  int inplace_input() const override { return 0; }
  void infer(InferCtx& ctx) const override {
    if (ctx.shape(0).size() != ctx.shape(1).size()) ctx.fail("dY " + shape_str(ctx.shape(0)) + " and Y " + shape_str(ctx.shape(1)) + " differ");
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &dY = c.in(0), &Y = c.in(1), &cond = c.in(3);
    if (dY.dims() != Y.dims()) c.fail("dY " + dims_str(dY.dims()) + " and Y " + dims_str(Y.dims()) + " differ");
    if (c.in(2).numel() != 1) c.fail("scale must be a scalar");
    std::vector<int64_t> bd;
    if (!kernels::broadcast_dims(Y.dims(), cond.dims(), &bd) || bd != Y.dims())
      c.fail("cond " + dims_str(cond.dims()) + " does not broadcast to Y " + dims_str(Y.dims()));
    kernels::dispatch<kernels::kFloats>(Y.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *dy = dY.data<T>(), *y = Y.data<T>(), scale = c.in(2).data<T>()[0];
      const bool* cp = cond.data<bool>();
      T* dx = c.out(0).data<T>();
      kernels::broadcast_rows<1>(Y.dims(), {&cond.dims()}, [&](int64_t o, auto off, auto st, int64_t n) {
        const T *dr = dy + o, *yr = y + o;
        const bool* cr = cp + off[0];
        if constexpr (std::is_same_v<T, float>) {
          if (st[0] == 1) return kernels::masked_softmax_grad_f32(dr, yr, cr, scale, dx + o, n);
        }
        double dot = 0;
        for (int64_t k = 0; k < n; ++k) dot += double(dr[k]) * double(yr[k]);
        const T s = T(dot);
        for (int64_t k = 0; k < n; ++k) dx[o + k] = cr[k * st[0]] ? T(0) : yr[k] * (dr[k] - s) * scale;
      });
    });
  }
};
const bool kMaskedSoftmaxGradRegistered = register_op("com.onnxtrain", "MaskedSoftmaxGrad", factory<MaskedSoftmaxGradOp>());

// Rows [r0, r1) of a (rows, n) mask with row stride rs (0: one row for all) and unit column stride: the columns
// [lo, hi) outside which every one of them is masked.
std::pair<int64_t, int64_t> open_band(const bool* cond, int64_t rs, int64_t r0, int64_t r1, int64_t n) {
  int64_t lo = n, hi = 0;
  for (int64_t r = r0; r < (rs ? r1 : r0 + 1); ++r) {
    const bool* row = cond + r * rs;
    auto* first = static_cast<const bool*>(std::memchr(row, 0, size_t(n)));
    if (!first) continue;
    lo = std::min(lo, int64_t(first - row));
    int64_t last = n - 1;
    while (row[last]) --last;
    hi = std::max(hi, last + 1);
  }
  return {lo, hi};
}

class AttentionSoftmaxOp : public Op {
 public:
  explicit AttentionSoftmaxOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  Dim flops(const ir::Node& n) const override {
    const ir::Value *a = n.inputs[0], *y = n.outputs[0];
    if (!a->has_shape || !y->has_shape) return Dim(0);
    return shape_numel(y->shape) * (Dim(2) * a->shape.back() + Dim(8));
  }
  void infer(InferCtx& ctx) const override {
    const Shape &a = ctx.shape(0), &b = ctx.shape(1);
    if (a.size() < 2 || b.size() < 2) ctx.fail("A and B must have rank >= 2, got " + shape_str(a) + " and " + shape_str(b));
    const Dim &ka = a.back(), &kb = b[b.size() - 2];
    if (ka.is_const() && kb.is_const() && ka != kb) ctx.fail("inner dims differ: " + shape_str(a) + " x " + shape_str(b));
    Shape out = broadcast_shapes(ctx, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
    out.push_back(a[a.size() - 2]);
    out.push_back(b.back());
    if (ctx.rank(3) > int64_t(out.size())) ctx.fail("cond " + shape_str(ctx.shape(3)) + " has a higher rank than the scores " + shape_str(out));
    ctx.set(0, ctx.dtype(0), out);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &A = c.in(0), &B = c.in(1), &cond = c.in(3);
    Tensor& out = c.out(0);
    const std::vector<int64_t>& od = out.dims();
    const size_t rank = od.size();
    const int64_t m = od[rank - 2], n = od[rank - 1], k = A.dims().back();
    if (B.dims()[B.rank() - 2] != k) c.fail("inner dims differ: " + dims_str(A.dims()) + " x " + dims_str(B.dims()));
    std::vector<int64_t> batch(od.begin(), od.end() - 2), ab(A.dims().begin(), A.dims().end() - 2),
        bb(B.dims().begin(), B.dims().end() - 2);
    std::vector<int64_t> cbd;
    if (!kernels::broadcast_dims(od, cond.dims(), &cbd) || cbd != od)
      c.fail("cond " + dims_str(cond.dims()) + " does not broadcast to the scores " + dims_str(od));
    auto sa = kernels::broadcast_strides(ab, batch), sb = kernels::broadcast_strides(bb, batch);
    auto sc = kernels::broadcast_strides(cond.dims(), od);
    const bool banded = sc[rank - 1] == 1;  // (a mask broadcast along the columns: every column computed)
    const int64_t nb = numel_of(batch);
    kernels::dispatch<kernels::kFloats>(A.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *a = A.data<T>(), *b = B.data<T>();
      T* o = out.data<T>();
      parallel_for(nb, m * n * k, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          auto [oa, ob, oc] = kernels::broadcast_offsets<3>(i, batch, {&sa, &sb, &sc});
          const T *ai = a + oa * m * k, *bi = b + ob * k * n;
          T* oi = o + i * m * n;
          for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
            int64_t mr = std::min(kTileRows, m - r0);
            auto [lo, hi] = banded ? open_band(cond.data<bool>() + oc, sc[rank - 2], r0, r0 + mr, n) : std::pair<int64_t, int64_t>{0, n};
            for (int64_t r = r0; r < r0 + mr; ++r) {  // (masked: what the product would put there is not read)
              std::fill(oi + r * n, oi + r * n + std::min(lo, n), T(0));
              if (hi > lo) std::fill(oi + r * n + hi, oi + (r + 1) * n, T(0));
            }
            if (hi > lo) kernels::gemm<T>(false, false, mr, hi - lo, k, T(1), ai + r0 * k, k, bi + lo, n, T(0), oi + r0 * n + lo, n);
          }
        }
      });
    });
    masked_softmax(c, out, c.in(2), cond, c.in(4), out);
  }
  // dS = the masked softmax's gradient; dA = dS B^T, dB = A^T dS.
  void grad(GradCtx& g) const override {
    if (!g.needs(0) && !g.needs(1) && !g.needs(2) && !g.needs(4)) return;
    ir::Value* ds = scores_grad(g, 2, 3);
    if (g.needs(0)) g.set_dx(0, g.matmul(ds, false, g.x(1), true));
    if (g.needs(1)) g.set_dx(1, g.matmul(g.x(0), true, ds, false));
  }

 private:
  static constexpr int64_t kTileRows = 32;
};
const bool kAttentionSoftmaxRegistered = register_op("com.onnxtrain", "AttentionSoftmax", factory<AttentionSoftmaxOp>());

}  // namespace
}  // namespace onnxtrain::ops
