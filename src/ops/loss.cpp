// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (weights, ignore_index,
// reductions none/sum/mean; the optional log-prob output).
#include "ops/loss.h"

#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {

LossAttrs loss_attrs(const ir::Node& n) {
  std::string r = n.attr_string("reduction", "mean");
  if (r != "none" && r != "sum" && r != "mean")
    throw ModelError(n.where() + ": reduction '" + r + "' is not none, sum or mean");
  return {n.op_type == "SoftmaxCrossEntropyLoss",
          r == "none"  ? LossAttrs::kNone
          : r == "sum" ? LossAttrs::kSum
                       : LossAttrs::kMean,
          n.attr_int("ignore_index", INT64_MIN), n.has_attr("ignore_index")};
}

namespace {

class LossOp : public OpWith<LossAttrs> {
 public:
  explicit LossOp(const ir::Node& n) : OpWith(loss_attrs(n)) {}
  // d loss / d log-probabilities: -w[t] * dy (scaled for "mean") at each target class;
  // SoftmaxCrossEntropyLoss then goes through its log-softmax, whose probabilities exp(x - lse) come from the
  // scores and their log-sum-exp (output 2, an onnxtrain extension): backward keeps (N, d...) numbers beside the
  // scores, not a second (N, C, d...) tensor of log-probabilities.
  void grad(GradCtx& g) const override {
    using ir::Value;
    Value *x = g.x(0), *t = g.x(1), *w = g.x(2);
    Value* dlogp = nullptr;
    if (Value* dy = g.dy(0)) {
      Value* ts = t;
      Value* coef = nullptr;  // per-element weight, or nullptr for 1
      if (attrs.has_ignore) {
        // (compared in int64: the index need not fit the targets' dtype, nor a double)
        Value* t64 = t->dtype == DType::kInt64 ? t : g.cast(t, DType::kInt64);
        Value* valid = g.logical_not(g.equal(t64, g.ints({attrs.ignore_index})));
        ts = g.where(valid, t, g.scalar(0, t->dtype));
        coef = g.cast(valid, x->dtype);
      }
      if (w) {
        Value* wt = g.gather(w, ts);
        coef = coef ? g.mul(coef, wt) : wt;
      }
      Value* per = dy;
      if (attrs.reduction == LossAttrs::kMean) {
        Value* denom = coef ? g.op("ReduceSum", {coef}, {{"keepdims", int64_t(0)}}) : g.cast(g.size(t), x->dtype);
        per = g.div(dy, denom);
      }
      if (coef) per = g.mul(per, coef);
      if (attrs.reduction != LossAttrs::kNone && !coef) per = g.expand(per, g.shape(t));
      if (attrs.softmax && !g.dy(1))  // per (N, d...) * (softmax - onehot(target)) in one pass
        return g.set_dx(0, g.ops("SoftmaxCrossEntropyLossGrad", {per, x, g.y(2), ts}, 1, {}, "com.onnxtrain")[0]);
      dlogp = g.op("ScatterElements", {g.zeros_like(x), g.unsqueeze(ts, {1}), g.unsqueeze(g.neg(per), {1})},
                   {{"axis", int64_t(1)}});
    }
    if (attrs.softmax && g.dy(1)) dlogp = dlogp ? g.add(dlogp, g.dy(1)) : g.dy(1);
    if (!dlogp) return;
    if (!attrs.softmax) return g.set_dx(0, dlogp);
    Value* total = g.reduce_sum(dlogp, {1}, true);
    g.set_dx(0, g.sub(dlogp, g.mul(g.exp(g.sub(x, g.y(2))), total)));
  }
  void infer(InferCtx& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.size() < 2) ctx.fail("scores must be (N, C, ...), got " + shape_str(x));
    Shape per(x);
    per.erase(per.begin() + 1);
    const Shape& target = ctx.shape(1);  // (N, d...): required, as the gradient reads it
    bool fits = target.size() == per.size();
    for (size_t i = 0; fits && i < per.size(); ++i)
      fits = !target[i].is_const() || !per[i].is_const() || target[i] == per[i];
    if (!fits) ctx.fail("target " + shape_str(target) + " does not fit the scores " + shape_str(x));
    ctx.set(0, ctx.dtype(0), attrs.reduction == LossAttrs::kNone ? per : Shape{});
    ctx.set(1, ctx.dtype(0), x);
    Shape one_class(x);
    one_class[1] = Dim(1);
    if (attrs.softmax) ctx.set(2, ctx.dtype(0), one_class);  // the log-sum-exp over the classes (N, 1, d...)
  }
};
// com.onnxtrain.SoftmaxCrossEntropyLossGrad(per (N, d...), scores (N, C, d...), lse (N, 1, d...), target (N, d...))
// = per * (exp(scores - lse) - onehot(target)): the scores' gradient in one pass (composed, it was a zero tensor, a
// scatter, a reduction and four elementwise passes over the logits).
class LossGradOp : public Op {
 public:
  explicit LossGradOp(const ir::Node&) {}
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(1), ctx.shape(1)); }
};

const bool kRegistered = register_ops({{"", "NegativeLogLikelihoodLoss", factory<LossOp>()},
                                       {"", "SoftmaxCrossEntropyLoss", factory<LossOp>()},
                                       {"com.onnxtrain", "SoftmaxCrossEntropyLossGrad", factory<LossGradOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
