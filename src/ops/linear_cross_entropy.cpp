// A language model's head and loss in one op, with no vocabulary-sized value:
// com.onnxtrain.LinearCrossEntropy(X (..., K), W (C, K), B (C)?, target (N))
//     -> (loss, lse (N), dX?, dW?, dB?, scores (..., C)?)
// computes
//   SoftmaxCrossEntropyLoss(X W^T + B, as (N, C) rows, target)
// (N the product of X's leading dims; attributes reduction and ignore_index as SoftmaxCrossEntropyLoss's, no class
// weights) a block of rows at a time (kernels/cpu/linear_cross_entropy.cpp): the (N, C) scores never exist whole,
// and forward keeps only each row's log-sum-exp. For X, W, B in bfloat16 or float16 the scores are rounded to that
// dtype and the loss and the log-sum-exps computed from them in float32: autocast's head, a 16-bit Linear whose
// output is cast to float32 for the loss. Backward,
// com.onnxtrain.LinearCrossEntropyGrad(dloss, X, W, B?, target, lse) -> (dX, dW, dB), computes each block's scores
// again and forms their gradient once, straight into dX, dW and dB: training stashes X, the targets and N numbers
// instead of the (N, C) scores, at the price of the head's product once more. For a loss of one number, forward
// forms dX, dW and dB for a loss gradient of 1 instead (outputs 2-4), backward scales them: the stash holds dX in
// X's place and dW from the end of forward, when backward would allocate it anyway. The linear_cross_entropy_fusion
// pass makes it of Linear -> [Reshape to rows] -> SoftmaxCrossEntropyLoss.
// Output 5, when asked for, is the Linear's output itself (a language model's logits, returned beside its loss),
// written block by block as the scores are formed; its gradient, when the caller makes one, is added by
// com.onnxtrain.LinearGradAdd(dScores?, X, W, base?) -> base + the gradient of X (wrt 0), W (1) or B (2) through
// the product, its dScores an input the caller may leave unset (then the base passes through, in place): the loop
// that keeps only the loss pays nothing for its logits' gradient.
#include "ops/grad.h"
#include "ops/loss.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

enum Input : size_t { kX, kW, kB, kTarget };
constexpr size_t kScores = 5;  // LinearCrossEntropy's output of the scores

// N, the rows of X (..., K), after checking X, W, B and the targets fit together.
Dim rows_of(InferCtx& ctx, size_t x, size_t w, size_t b, size_t target) {
  const Shape &xs = ctx.shape(x), &ws = ctx.shape(w);
  if (xs.size() < 2 || ws.size() != 2)
    ctx.fail("X must have a rank of at least 2 and W a rank of 2, got " + shape_str(xs) + " and " + shape_str(ws));
  if (xs.back().is_const() && ws[1].is_const() && xs.back() != ws[1])
    ctx.fail("X " + shape_str(xs) + " and W " + shape_str(ws) + " differ in their inner dim");
  if (ctx.has(b) && (ctx.rank(b) != 1 || (ctx.shape(b)[0].is_const() && ws[0].is_const() && ctx.shape(b)[0] != ws[0])))
    ctx.fail("B " + shape_str(ctx.shape(b)) + " must hold one number per row of W " + shape_str(ws));
  Dim n = shape_numel(Shape(xs.begin(), xs.end() - 1));
  const Shape& t = ctx.shape(target);
  if (t.size() != 1 || (t[0].is_const() && n.is_const() && t[0] != n))
    ctx.fail("target " + shape_str(t) + " must hold one class per row of X " + shape_str(xs));
  if (ctx.dtype(target) != DType::kInt64 && ctx.dtype(target) != DType::kInt32)
    ctx.fail("target must be int64 or int32");
  return n;
}

class LinearCrossEntropyOp : public OpWith<LossAttrs> {
 public:
  explicit LinearCrossEntropyOp(const ir::Node& n) : OpWith(loss_attrs(n)) {}
  bool differentiable_output(size_t i) const override { return i == 0 || i == kScores; }
  // Run again in backward, it forms what its clone is asked for: the head's dW, say, instead of holding it from the
  // end of forward (the scores' product once more, a trade-off the memory optimizer weighs by size).
  bool recomputable() const override { return true; }
  bool omittable_output(size_t i) const override { return i > 0; }
  Dim flops(const ir::Node& n) const override {
    const ir::Value *x = n.inputs[kX], *w = n.inputs[kW];
    if (!x->has_shape || !w->has_shape || w->shape.size() != 2) return Dim(0);
    const size_t products =
        1 + (n.outputs.size() > 2 + kX && n.outputs[2 + kX]) + (n.outputs.size() > 2 + kW && n.outputs[2 + kW]);
    return shape_numel(x->shape) * w->shape[0] * Dim(2 * int64_t(products));
  }
  void infer(InferCtx& ctx) const override {
    Dim n = rows_of(ctx, kX, kW, kB, kTarget);
    if (!dtype_is_float(ctx.dtype(kX)) || ctx.dtype(kW) != ctx.dtype(kX) ||
        (ctx.has(kB) && ctx.dtype(kB) != ctx.dtype(kX)))
      ctx.fail("X, W and B must have one float dtype");
    const DType x = ctx.dtype(kX), loss = dtype_is_16bit_float(x) ? DType::kFloat32 : x;
    ctx.set(0, loss, attrs.reduction == LossAttrs::kNone ? Shape{n} : Shape{});
    ctx.set(1, loss, Shape{n});
    for (size_t i : {kX, kW, kB})  // the gradients formed in forward, when asked for
      if (ctx.num_outputs() > 2 + i && ctx.node().outputs[2 + i])
        ctx.set(2 + i, x, i == kB ? Shape{ctx.shape(kW)[0]} : ctx.shape(i));
    if (ctx.num_outputs() > kScores && ctx.node().outputs[kScores]) {
      Shape scores = ctx.shape(kX);
      scores.back() = ctx.shape(kW)[0];
      ctx.set(kScores, x, scores);
    }
  }
  // A loss of one number ("mean", "sum"): its gradients for a loss gradient of 1 are formed in forward (outputs
  // 2-4), while each block's scores are at hand, and backward scales them by the loss's gradient: the head's
  // product is not computed again. A loss per row: com.onnxtrain.LinearCrossEntropyGrad computes the scores again.
  void grad(GradCtx& g) const override {
    const ir::Node& n = g.node();
    ir::Value* dscores = n.outputs.size() > kScores && n.outputs[kScores] ? g.dy(kScores) : nullptr;
    if ((!g.dy(0) && !dscores) || (!g.needs(kX) && !g.needs(kW) && !g.needs(kB))) return;
    std::vector<ir::Value*> d(3, nullptr);  // through the loss
    if (g.dy(0) && attrs.reduction != LossAttrs::kNone) {
      for (size_t i : {kX, kW, kB}) {
        if (!g.needs(i)) continue;
        ir::Value* unit = g.y(2 + i);
        d[i] = g.mul(unit, unit->dtype == g.dy(0)->dtype ? g.dy(0) : g.cast(g.dy(0), unit->dtype));
      }
    } else if (g.dy(0)) {
      ir::Attributes attrs;
      for (const char* a : {"reduction", "ignore_index"})
        if (n.attrs.count(a)) attrs[a] = n.attrs.at(a);
      d = g.ops("LinearCrossEntropyGrad", {g.dy(0), g.x(kX), g.x(kW), g.x(kB), g.x(kTarget), g.y(1)}, 3, attrs,
                "com.onnxtrain");
    }
    for (size_t i : {kX, kW, kB}) {
      if (!g.needs(i)) continue;
      if (dscores)
        d[i] = g.ops("LinearGradAdd", {dscores, g.x(kX), g.x(kW), d[i]}, 1, {{"wrt", int64_t(i)}}, "com.onnxtrain")[0];
      g.set_dx(i, d[i]);
    }
  }
};

class LinearCrossEntropyGradOp : public OpWith<LossAttrs> {
 public:
  explicit LinearCrossEntropyGradOp(const ir::Node& n) : OpWith(loss_attrs(n)) {}
  DType output_dtype(size_t, const std::vector<DType>& in) const override { return in[1]; }
  void infer(InferCtx& ctx) const override {
    rows_of(ctx, 1, 2, 3, 4);
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
    ctx.set(1, ctx.dtype(1), ctx.shape(2));
    ctx.set(2, ctx.dtype(1), Shape{ctx.shape(2)[0]});
  }
};

LinearGradAddAttrs wrt_of(const ir::Node& n) {
  const int64_t wrt = n.attr_int("wrt", 0);
  if (wrt < 0 || wrt > 2)
    throw ModelError(n.where() + ": wrt must be 0 (X), 1 (W) or 2 (B), got " + std::to_string(wrt));
  return {LinearGradAddAttrs::Wrt(wrt)};
}

// com.onnxtrain.LinearGradAdd(dY (..., C)?, X (..., K), W (C, K), base?) -> base + dY W (wrt 0: X's shape),
// base + dY^T X (wrt 1: W's) or base + dY summed over its rows (wrt 2: (C)), written in base's buffer where the plan
// allows; an absent base reads as zeros, and dY may be left unset at run time (the gradient of an output the caller
// made none for): then the output is the base.
class LinearGradAddOp : public OpWith<LinearGradAddAttrs> {
 public:
  explicit LinearGradAddOp(const ir::Node& n) : OpWith(wrt_of(n)) {}
  int inplace_input() const override { return 3; }
  bool input_may_be_unset(size_t i) const override { return i == 0; }
  DType output_dtype(size_t, const std::vector<DType>& in) const override { return in[1]; }
  Dim flops(const ir::Node& n) const override {
    const ir::Value *x = n.inputs[1], *w = n.inputs[2];
    if (attrs.wrt == LinearGradAddAttrs::kB || !x->has_shape || !w->has_shape || w->shape.size() != 2) return Dim(0);
    return shape_numel(x->shape) * w->shape[0] * Dim(2);
  }
  void infer(InferCtx& ctx) const override {
    const Shape &xs = ctx.shape(1), &ws = ctx.shape(2);
    if (xs.size() < 2 || ws.size() != 2)
      ctx.fail("X must have a rank of at least 2 and W a rank of 2, got " + shape_str(xs) + " and " + shape_str(ws));
    if (ctx.dtype(2) != ctx.dtype(1) || (ctx.has(0) && ctx.dtype(0) != ctx.dtype(1)) ||
        (ctx.has(3) && ctx.dtype(3) != ctx.dtype(1)))
      ctx.fail("dY, X, W and the base must have one dtype");
    ctx.set(0, ctx.dtype(1), attrs.wrt == LinearGradAddAttrs::kX ? xs : attrs.wrt == LinearGradAddAttrs::kW ? ws
                                                                                                : Shape{ws[0]});
  }
};

const bool kRegistered = register_ops({
    {"com.onnxtrain", "LinearGradAdd", factory<LinearGradAddOp>()},
    {"com.onnxtrain", "LinearCrossEntropy", factory<LinearCrossEntropyOp>()},
    {"com.onnxtrain", "LinearCrossEntropyGrad", factory<LinearCrossEntropyGradOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
