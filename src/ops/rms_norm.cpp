// com.onnxtrain.RMSNormalization(X, scale) -> (Y, InvStdDev): Y = X / sqrt(mean(X^2) + epsilon) * scale over the
// dims from `axis` on (Llama's, T5's, Gemma's norm; ONNX's RMSNormalization of opset 23), the statistics in float32
// or wider, Y of X's dtype or of attribute `to` (a float32 norm whose output autocast casts to 16 bits writes them
// itself: norm_output_cast.cpp); and its gradient com.onnxtrain.RMSNormalizationGrad(dY, X, scale, InvStdDev) ->
// (dX, dscale), dY of Y's dtype.
#include "ops/normalization.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

NormAttrs rms_attrs(const ir::Node& n) {
  return {n.attr_int("axis", -1), n.attr_float("epsilon", 1e-5f), 0, false, false, n.attr_int("to", 0)};
}

// The per-row statistic's shape: X's with the normalized dims 1.
Shape row_shape(InferCtx& ctx, int64_t axis) {
  int64_t a = ctx.axis(axis, ctx.rank(0));
  Shape s = ctx.shape(0);
  for (size_t i = size_t(a); i < s.size(); ++i) s[i] = Dim(1);
  return s;
}

class RMSNormOp : public OpWith<NormAttrs> {
 public:
  explicit RMSNormOp(const ir::Node& n) : OpWith(rms_attrs(n)) {}
  bool recomputable() const override { return true; }
  // Y is shaped as X, a normalized dim that X leaves symbolic taking the scale's size (the product with the scale
  // that the fusion replaced said as much).
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(attrs.axis, ctx.rank(0));
    Shape y = ctx.shape(0);
    const Shape& w = ctx.shape(1);
    if (int64_t(w.size()) != ctx.rank(0) - a)
      ctx.fail("scale " + shape_str(w) + " is not shaped as the normalized dims of " + shape_str(y));
    for (size_t i = 0; i < w.size(); ++i) {
      Dim& d = y[size_t(a) + i];
      if (d.is_const() && w[i].is_const() && d != w[i])
        ctx.fail("scale " + shape_str(w) + " is not shaped as the normalized dims of " + shape_str(ctx.shape(0)));
      if (!d.is_const()) d = w[i];
    }
    ctx.set(0, norm_output_dtype(attrs, ctx), y);
    ctx.set(1, ctx.dtype(0), row_shape(ctx, attrs.axis));
  }
  void grad(GradCtx& g) const override {
    auto d = g.ops("RMSNormalizationGrad", {g.dy(0), g.x(0), g.x(1), g.y(1)}, 2,
                   {{"axis", attrs.axis}, {"epsilon", attrs.epsilon}}, "com.onnxtrain");
    for (size_t i = 0; i < 2; ++i)
      if (g.needs(i)) g.set_dx(i, d[i]);
  }
};

// dX = rstd (g - xhat mean(g xhat)) per row, g = dY scale and xhat = X rstd; dscale = the sum over rows of dY xhat.
// Input 4, base, where given, is added to dX (the residual stream's gradient: norm_grad_residual.cpp), dX written in
// its place where it dies there.
class RMSNormGradOp : public OpWith<NormAttrs> {
 public:
  explicit RMSNormGradOp(const ir::Node& n) : OpWith(rms_attrs(n)), base_(n.input(4) != nullptr) {}
  void infer(InferCtx& ctx) const override {
    check_grad_base(ctx, 4);
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
    ctx.set(1, ctx.dtype(2), ctx.shape(2));
  }
  int inplace_input() const override { return base_ ? 4 : -1; }

 private:
  bool base_;
};

const bool kRegistered = register_ops({
    {"com.onnxtrain", "RMSNormalization", factory<RMSNormOp>()},
    {"com.onnxtrain", "RMSNormalizationGrad", factory<RMSNormGradOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
