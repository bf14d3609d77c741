// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (weights, ignore_index,
// reductions none/sum/mean; the optional log-prob output).
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

class LossOp : public Op {
 public:
  explicit LossOp(const ir::Node& n)
      : softmax_(n.op_type == "SoftmaxCrossEntropyLoss"), reduction_(n.attr_string("reduction", "mean")),
        ignore_(n.attr_int("ignore_index", INT64_MIN)), has_ignore_(n.has_attr("ignore_index")) {
    if (reduction_ != "none" && reduction_ != "sum" && reduction_ != "mean")
      throw ModelError(n.where() + ": reduction '" + reduction_ + "' is not none, sum or mean");
  }
  // d loss / d log-probabilities: -w[t] * dy (scaled for "mean") at each target class;
  // SoftmaxCrossEntropyLoss then goes through its log-softmax.
  void grad(GradCtx& g) const override {
    using ir::Value;
    Value *x = g.x(0), *t = g.x(1), *w = g.x(2);
    Value* logp = softmax_ ? g.y(1) : x;
    Value* dlogp = nullptr;
    if (Value* dy = g.dy(0)) {
      Value* ts = t;
      Value* coef = nullptr;  // per-element weight, or nullptr for 1
      if (has_ignore_) {
        Value* valid = g.op("Not", {g.op("Equal", {t, g.scalar(double(ignore_), t->dtype)})});
        ts = g.op("Where", {valid, t, g.scalar(0, t->dtype)});
        coef = g.op("Cast", {valid}, {{"to", int64_t(x->dtype)}});
      }
      if (w) {
        Value* wt = g.op("Gather", {w, ts});
        coef = coef ? g.mul(coef, wt) : wt;
      }
      Value* per = dy;
      if (reduction_ == "mean") {
        Value* denom = coef ? g.op("ReduceSum", {coef}, {{"keepdims", int64_t(0)}})
                            : g.op("Cast", {g.op("Size", {t})}, {{"to", int64_t(x->dtype)}});
        per = g.div(dy, denom);
      }
      if (coef) per = g.mul(per, coef);
      if (reduction_ != "none" && !coef) per = g.op("Expand", {per, g.shape(t)});
      dlogp = g.op("ScatterElements", {g.zeros_like(logp), g.op("Unsqueeze", {ts, g.ints({1})}),
                                       g.op("Unsqueeze", {g.neg(per), g.ints({1})})},
                   {{"axis", int64_t(1)}});
    }
    if (softmax_ && g.dy(1)) dlogp = dlogp ? g.add(dlogp, g.dy(1)) : g.dy(1);
    if (!dlogp) return;
    if (!softmax_) return g.set_dx(0, dlogp);
    Value* total = g.op("ReduceSum", {dlogp, g.ints({1})}, {{"keepdims", int64_t(1)}});
    g.set_dx(0, g.sub(dlogp, g.mul(g.op("Exp", {logp}), total)));
  }
  void infer(InferCtx& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.size() < 2) ctx.fail("scores must be (N, C, ...), got " + shape_str(x));
    Shape per(x);
    per.erase(per.begin() + 1);
    ctx.set(0, ctx.dtype(0), reduction_ == "none" ? per : Shape{});
    ctx.set(1, ctx.dtype(0), x);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& x = c.in(0);
    auto labels = c.in(1).to_int64();
    int64_t n = x.dims()[0], cls = x.dims()[1], d = x.numel() / std::max<int64_t>(n * cls, 1);
    kernels::dispatch<kernels::kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* w = c.has(2) ? c.in(2).data<T>() : nullptr;
      // log-probabilities: the input itself (NLL) or its log-softmax over C.
      std::vector<T> logp_buf;
      const T* lp = x.data<T>();
      if (softmax_) {
        T* dst = c.wants(1) ? c.out(1).data<T>() : (logp_buf.resize(size_t(x.numel())), logp_buf.data());
        const T* xp = x.data<T>();
        for (int64_t b = 0; b < n; ++b)
          for (int64_t j = 0; j < d; ++j) {
            T m = -INFINITY;
            for (int64_t k = 0; k < cls; ++k) m = std::max(m, xp[(b * cls + k) * d + j]);
            T s = 0;
            for (int64_t k = 0; k < cls; ++k) s += std::exp(xp[(b * cls + k) * d + j] - m);
            T lse = m + std::log(s);
            for (int64_t k = 0; k < cls; ++k) dst[(b * cls + k) * d + j] = xp[(b * cls + k) * d + j] - lse;
          }
        lp = dst;
      }
      std::vector<T> per(size_t(n * d));
      double total = 0, wsum = 0;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t j = 0; j < d; ++j) {
          int64_t t = labels[size_t(b * d + j)];
          if (has_ignore_ && t == ignore_) {
            per[size_t(b * d + j)] = T(0);
            continue;
          }
          if (t < 0 || t >= cls) c.fail("label " + std::to_string(t) + " is out of range for " + std::to_string(cls) + " classes");
          T wt = w ? w[t] : T(1);
          per[size_t(b * d + j)] = -lp[(b * cls + t) * d + j] * wt;
          total += double(per[size_t(b * d + j)]);
          wsum += double(wt);
        }
      T* out = c.out(0).data<T>();
      if (reduction_ == "none") std::copy(per.begin(), per.end(), out);
      else if (reduction_ == "sum") out[0] = T(total);
      else out[0] = T(wsum == 0 ? 0.0 : total / wsum);
    });
  }

 private:
  bool softmax_;
  std::string reduction_;
  int64_t ignore_;
  bool has_ignore_;
};
OT_REGISTER_OP("NegativeLogLikelihoodLoss", LossOp);
OT_REGISTER_OP("SoftmaxCrossEntropyLoss", LossOp);

}  // namespace
}  // namespace onnxtrain::ops
