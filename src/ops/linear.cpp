// com.onnxtrain.Linear(X, W, B?) = X W^T + B: a Linear layer as one GEMM over all rows of X (..., K), with
// W (N, K) read transposed (kernels/cpu/linear.cpp). The exporters write it as
// Add(MatMul(X, Transpose(W)), B); the linear_fusion pass makes this op of that, saving the copy of W^T
// and a pass over the output per layer.
#include "ops/grad.h"
#include "ops/matmul.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

using ir::Value;

class LinearOp : public OpWith<LinearAttrs> {
 public:
  explicit LinearOp(const ir::Node& n) : OpWith({product_output_dtype(n)}) {}
  DType output_dtype(size_t, const std::vector<DType>& in) const override {
    return product_dtype(attrs.to, in[0]);
  }
  bool recomputable() const override { return true; }
  Dim flops(const ir::Node& n) const override {
    const Value *x = n.inputs[0], *w = n.inputs[1];
    if (!x->has_shape || !w->has_shape || w->shape.size() != 2) return Dim(0);
    return shape_numel(x->shape) * w->shape[0] * Dim(2);
  }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) < 1 || ctx.rank(1) != 2)
      ctx.fail("X must have a rank of at least 1 and W a rank of 2, got " + shape_str(ctx.shape(0)) + " and " +
               shape_str(ctx.shape(1)));
    const Dim &k = ctx.shape(0).back(), &kw = ctx.shape(1)[1];
    if (k.is_const() && kw.is_const() && k != kw)
      ctx.fail("X " + shape_str(ctx.shape(0)) + " and W " + shape_str(ctx.shape(1)) + " differ in their inner dim");
    Shape out = ctx.shape(0);
    out.back() = ctx.shape(1)[0];
    ctx.set(0, product_dtype(ctx, attrs.to), out);
  }
  // dX = dY W, dW = dY^T X (over all rows), dB = the sum of dY over all rows.
  void grad(GradCtx& g) const override {
    Value *x = g.x(0), *w = g.x(1), *dy = g.dy(0);
    if (dy->dtype != x->dtype) dy = g.cast(dy, x->dtype);  // (a float32 output: the Cast's gradient it absorbed)
    auto rows_of = [&](Value* v) {  // (rows, last dim)
      return g.reshape(v, g.concat({g.ints({-1}), g.gather(g.shape(v), g.ints({-1}))}, 0));
    };
    Value* dy2 = rows_of(dy);
    if (g.needs(0)) g.set_dx(0, g.reshape(g.op("Gemm", {dy2, w}), g.shape(x)));
    if (g.needs(1)) g.set_dx(1, g.op("Gemm", {dy2, rows_of(x)}, {{"transA", int64_t(1)}}));
    if (g.needs(2)) g.set_dx(2, g.reduce_sum(dy2, {0}, false));
  }
};
const bool kRegistered = register_ops({{"com.onnxtrain", "Linear", factory<LinearOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
