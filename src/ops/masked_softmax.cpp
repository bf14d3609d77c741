// Attention's masked softmax, fused:
// com.onnxtrain.MaskedSoftmax(X, scale, cond, fill) = Softmax(Where(cond, fill, X * scale)) along the last axis,
// scale and fill scalars, cond broadcast to X: scale, mask and softmax in one pass over the scores (three
// before; kernels/cpu/masked_softmax.cpp); the masked_softmax_fusion pass makes it.
// com.onnxtrain.AttentionSoftmax(A, B, scale, cond, fill) = MaskedSoftmax(MatMul(A, B), scale, cond, fill): the
// scores' product computed only for the columns some row of a 32-row tile leaves unmasked (a causal mask:
// ~60% of the product), then the masked softmax; the attention_softmax_fusion pass makes it.
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

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
    if (ctx.rank(2) > ctx.rank(0))
      ctx.fail("cond " + shape_str(ctx.shape(2)) + " has a higher rank than X " + shape_str(ctx.shape(0)));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
  }
  void grad(GradCtx& g) const override {
    if (g.needs(0) || g.needs(1) || g.needs(3)) g.set_dx(0, scores_grad(g, 1, 2));
  }
};

// com.onnxtrain.MaskedSoftmaxGrad(dY, Y, scale, cond) = Where(cond, 0, Y (dY - sum(dY Y))) * scale, sums along
// the last axis: what the six ops it stands for (the softmax's gradient, the mask, the scale) computed in six
// passes over the scores, in one.
class MaskedSoftmaxGradOp : public Op {
 public:
  explicit MaskedSoftmaxGradOp(const ir::Node&) {}
  int inplace_input() const override { return 0; }
  void infer(InferCtx& ctx) const override {
    if (ctx.shape(0).size() != ctx.shape(1).size())
      ctx.fail("dY " + shape_str(ctx.shape(0)) + " and Y " + shape_str(ctx.shape(1)) + " differ");
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
  }
};

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
    if (a.size() < 2 || b.size() < 2)
      ctx.fail("A and B must have rank >= 2, got " + shape_str(a) + " and " + shape_str(b));
    const Dim &ka = a.back(), &kb = b[b.size() - 2];
    if (ka.is_const() && kb.is_const() && ka != kb)
      ctx.fail("inner dims differ: " + shape_str(a) + " x " + shape_str(b));
    Shape out = broadcast_shapes(ctx, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
    out.push_back(a[a.size() - 2]);
    out.push_back(b.back());
    if (ctx.rank(3) > int64_t(out.size()))
      ctx.fail("cond " + shape_str(ctx.shape(3)) + " has a higher rank than the scores " + shape_str(out));
    ctx.set(0, ctx.dtype(0), out);
  }
  // dS = the masked softmax's gradient; dA = dS B^T, dB = A^T dS.
  void grad(GradCtx& g) const override {
    if (!g.needs(0) && !g.needs(1) && !g.needs(2) && !g.needs(4)) return;
    ir::Value* ds = scores_grad(g, 2, 3);
    if (g.needs(0)) g.set_dx(0, g.matmul(ds, false, g.x(1), true));
    if (g.needs(1)) g.set_dx(1, g.matmul(g.x(0), true, ds, false));
  }
};
const bool kRegistered = register_ops({
    {"com.onnxtrain", "MaskedSoftmax", factory<MaskedSoftmaxOp>()},
    {"com.onnxtrain", "MaskedSoftmaxGrad", factory<MaskedSoftmaxGradOp>()},
    {"com.onnxtrain", "AttentionSoftmax", factory<AttentionSoftmaxOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
