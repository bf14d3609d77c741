// LayerNormalization, BatchNormalization (inference and training mode) and
// InstanceNormalization. Statistics are accumulated in double.
#include "ops/normalization.h"

#include <algorithm>

#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

using ir::Value;

// The input gradient of xhat = (x - mean) * rstd, normalized over `axes`, given
// dxhat: rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
Value* normalized_dx(GradCtx& g, Value* xhat, Value* rstd, Value* dxhat, const std::vector<int64_t>& axes) {
  Value* m1 = g.reduce_mean(dxhat, axes, true);
  Value* m2 = g.reduce_mean(g.mul(dxhat, xhat), axes, true);
  return g.mul(rstd, g.sub(g.sub(dxhat, m1), g.mul(xhat, m2)));
}

// Batch statistics over `axes` (kept): returns xhat and rstd.
std::pair<Value*, Value*> normalize(GradCtx& g, Value* x, const std::vector<int64_t>& axes, float eps) {
  Value* centered = g.sub(x, g.reduce_mean(x, axes, true));
  Value* var = g.reduce_mean(g.mul(centered, centered), axes, true);
  Value* rstd = g.reciprocal(g.sqrt(g.add(var, g.like(eps, var))));
  return {g.mul(centered, rstd), rstd};
}

std::vector<int64_t> range_axes(int64_t from, int64_t to) {
  std::vector<int64_t> r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

// Whether a BatchNormalization computes its batch's statistics: its training_mode attribute from opset 14; before,
// whether it has more outputs than Y (opsets 7-13 say training mode by the running and saved statistics).
bool batch_statistics(const ir::Node& n) {
  if (n.op_type != "BatchNormalization" || n.opset <= 0 || n.opset >= 14) return n.attr_int("training_mode", 0) != 0;
  return std::any_of(n.outputs.begin() + 1, n.outputs.end(), [](const ir::Value* v) { return v != nullptr; });
}

NormAttrs norm_attrs(const ir::Node& n) {
  return {n.attr_int("axis", -1), n.attr_float("epsilon", 1e-5f), n.attr_float("momentum", 0.9f), batch_statistics(n),
          n.attr_int("unbiased_running_var", 0) != 0, n.attr_int("to", 0)};
}

}  // namespace

DType norm_output_dtype(const NormAttrs& a, InferCtx& ctx) {
  const DType x = ctx.dtype(0), y = a.to ? DType(a.to) : x;
  if (y != x && !(x == DType::kFloat32 && dtype_is_16bit_float(y)))
    ctx.fail("attribute to (" + std::to_string(a.to) + ") with X of " + dtype_name(x) +
             ": Y must be of X's dtype, or of 16 bits beside a float32 X");
  return y;
}

void check_grad_base(InferCtx& ctx, size_t base) {
  if (ctx.has(base) && (ctx.dtype(base) != ctx.dtype(1) || ctx.shape(base) != ctx.shape(1)))
    ctx.fail("the base " + dtype_name(ctx.dtype(base)) + " " + shape_str(ctx.shape(base)) + " must be X's " +
             dtype_name(ctx.dtype(1)) + " " + shape_str(ctx.shape(1)));
}

bool layer_norm_fused_grad(const ir::Value* x, const ir::Value* w, int64_t axis) {
  if (!x->has_shape || !w->has_shape || w->dtype != x->dtype) return false;
  const int64_t r = int64_t(x->shape.size()), a = axis < 0 ? axis + r : axis;
  return a >= 0 && a < r && Shape(x->shape.begin() + a, x->shape.end()) == w->shape;
}

namespace {

// LayerNormalization; com.onnxtrain.LayerNormalization is the same with attribute `to`, Y's dtype (a float32 norm
// whose output autocast casts to 16 bits writes them itself: norm_output_cast.cpp).
class LayerNormOp : public OpWith<NormAttrs> {
 public:
  explicit LayerNormOp(const ir::Node& n) : OpWith(norm_attrs(n)) {}
  void grad(GradCtx& g) const override;
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(attrs.axis, ctx.rank(0));
    ctx.set(0, norm_output_dtype(attrs, ctx), ctx.shape(0));
    Shape stat = ctx.shape(0);
    for (size_t i = size_t(a); i < stat.size(); ++i) stat[i] = Dim(1);
    ctx.set(1, ctx.dtype(0), stat);
    ctx.set(2, ctx.dtype(0), stat);
  }
};

// com.onnxtrain.LayerNormalizationGrad(dy, x, scale, mean, rstd, base?) = (dx, dscale, dbias), axis and epsilon as
// the forward's: the gradient of a layer norm whose scale covers the normalized dims, in one pass over the rows and
// one over the columns (the composed form below was a dozen elementwise ops and reductions over the activation).
// base, where given, is added to dx (the residual stream's gradient: norm_grad_residual.cpp), dx written in its place
// where it dies there.
class LayerNormGradOp : public OpWith<NormAttrs> {
 public:
  explicit LayerNormGradOp(const ir::Node& n) : OpWith(norm_attrs(n)), base_(n.input(5) != nullptr) {}
  void infer(InferCtx& ctx) const override {
    check_grad_base(ctx, 5);
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
    ctx.set(1, ctx.dtype(2), ctx.shape(2));
    ctx.set(2, ctx.dtype(2), ctx.shape(2));
  }
  int inplace_input() const override { return base_ ? 5 : -1; }

 private:
  bool base_;
};

void LayerNormOp::grad(GradCtx& g) const {
  Value *x = g.x(0), *w = g.x(1), *dy = g.dy(0);
  int64_t r = int64_t(x->shape.size()), a = attrs.axis < 0 ? attrs.axis + r : attrs.axis;
  if (layer_norm_fused_grad(x, w, attrs.axis)) {
    auto d = g.ops("LayerNormalizationGrad", {dy, x, w, g.y(1), g.y(2)}, 3,
                   {{"axis", int64_t(a)}, {"epsilon", attrs.epsilon}}, "com.onnxtrain");
    for (size_t i = 0; i < 3; ++i)
      if (g.needs(i)) g.set_dx(i, d[i]);
    return;
  }
  if (dy->dtype != x->dtype) dy = g.cast(dy, x->dtype);  // (a Y of its own dtype)
  Value* rstd = g.y(2);
  Value* xhat = g.mul(g.sub(x, g.y(1)), rstd);
  if (g.needs(0)) g.set_dx(0, normalized_dx(g, xhat, rstd, g.mul(dy, w), range_axes(a, r)));
  if (g.needs(1)) g.set_dx(1, g.mul(dy, xhat));  // the engine sums the leading dims
  if (g.needs(2)) g.set_dx(2, dy);
}

class BatchNormOp : public OpWith<NormAttrs> {
 public:
  explicit BatchNormOp(const ir::Node& n) : OpWith(norm_attrs(n)) {
    if (n.opset > 0 && n.opset < 9 && n.has_attr("spatial") && n.attr_int("spatial", 1) == 0)
      throw UnsupportedError(n.where() + ": spatial=0 is not supported");
  }
  bool differentiable_output(size_t i) const override { return i == 0; }
  void grad(GradCtx& g) const override {
    Value *x = g.x(0), *dy = g.dy(0);
    // A bf16 or float16 input with float32 parameters (autocast): the backward computes in the parameters' dtype.
    const DType x_type = x->dtype, p_type = g.x(1)->dtype;
    if (x_type != p_type) x = g.cast(x, p_type), dy = g.cast(dy, p_type);
    auto as_x = [&](Value* v) { return x_type == p_type ? v : g.cast(v, x_type); };
    int64_t r = int64_t(x->shape.size());
    std::vector<int64_t> axes = {0}, channel_axes = {0};  // all but the channel dim; where [C] broadcasts
    for (int64_t i = 2; i < r; ++i) axes.push_back(i), channel_axes.push_back(i);
    auto per_channel = [&](Value* v) { return g.unsqueeze(v, channel_axes); };
    auto as = [&](Value* v, DType t) { return v->dtype == t ? v : g.cast(v, t); };
    Value *xhat, *rstd;
    if (attrs.training) {
      std::tie(xhat, rstd) = normalize(g, x, axes, attrs.epsilon);
    } else {  // (the mean and variance given, of their own dtype: the running ones, or a batch's computed before)
      Value *mean = as(g.x(3), p_type), *var = as(g.x(4), p_type);
      rstd = per_channel(g.reciprocal(g.sqrt(g.add(var, g.like(attrs.epsilon, var)))));
      xhat = g.mul(g.sub(x, per_channel(mean)), rstd);
    }
    Value* dxhat = g.mul(dy, per_channel(g.x(1)));
    if (g.needs(0)) g.set_dx(0, as_x(attrs.training ? normalized_dx(g, xhat, rstd, dxhat, axes) : g.mul(dxhat, rstd)));
    if (g.needs(1)) g.set_dx(1, g.reduce_sum(g.mul(dy, xhat), axes, false));
    if (g.needs(2)) g.set_dx(2, g.reduce_sum(dy, axes, false));
    if (attrs.training) return;  // (the running statistics given do not reach Y)
    // Given statistics that depend on what is trained (a batch's, as PyTorch's exporter writes an untracked
    // BatchNorm): d/dmean = -sum(dxhat rstd), d/dvar = -sum(dxhat xhat rstd^2) / 2.
    if (g.needs(3)) g.set_dx(3, as(g.neg(g.reduce_sum(g.mul(dxhat, rstd), axes, false)), g.x(3)->dtype));
    if (g.needs(4)) {
      Value* dvar = g.reduce_sum(g.mul(g.mul(dxhat, xhat), g.mul(rstd, rstd)), axes, false);
      g.set_dx(4, as(g.mul(dvar, g.like(-0.5, dvar)), g.x(4)->dtype));
    }
  }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) < 2) ctx.fail("input must be (N, C, ...), got " + shape_str(ctx.shape(0)));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
    Shape ch = {ctx.shape(0)[1]};
    for (size_t i = 1; i < ctx.num_outputs(); ++i) ctx.set(i, ctx.dtype(3), ch);
  }
};

class InstanceNormOp : public OpWith<NormAttrs> {
 public:
  explicit InstanceNormOp(const ir::Node& n) : OpWith(norm_attrs(n)) {}
  void grad(GradCtx& g) const override {
    Value *x = g.x(0), *dy = g.dy(0);
    int64_t r = int64_t(x->shape.size());
    std::vector<int64_t> spatial = range_axes(2, r), batch_spatial = range_axes(2, r), trailing = range_axes(1, r - 1);
    batch_spatial.insert(batch_spatial.begin(), 0);
    auto [xhat, rstd] = normalize(g, x, spatial, attrs.epsilon);
    Value* dxhat = g.mul(dy, g.unsqueeze(g.x(1), trailing));
    if (g.needs(0)) g.set_dx(0, normalized_dx(g, xhat, rstd, dxhat, spatial));
    if (g.needs(1)) g.set_dx(1, g.reduce_sum(g.mul(dy, xhat), batch_spatial, false));
    if (g.needs(2)) g.set_dx(2, g.reduce_sum(dy, batch_spatial, false));
  }
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
};

const bool kRegistered = register_ops({
    {"", "LayerNormalization", factory<LayerNormOp>()},
    {"com.onnxtrain", "LayerNormalization", factory<LayerNormOp>()},
    {"", "BatchNormalization", factory<BatchNormOp>()},
    {"", "InstanceNormalization", factory<InstanceNormOp>()},
    {"com.onnxtrain", "LayerNormalizationGrad", factory<LayerNormGradOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
