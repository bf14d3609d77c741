// com.onnxtrain.RotaryEmbedding(X, cos, sin) = X cos + rotate_half(X) sin, rotate_half(X) = concat(-X2, X1) of X's
// halves X1, X2 on the last dim (Llama's, Qwen2's, Mistral's rotary position embedding of queries and keys):
// Y1 = X1 cos1 - X2 sin1, Y2 = X2 cos2 + X1 sin2, cos and sin broadcast to X. With transposed=1 it applies the
// transposed map, Y1 = X1 cos1 + X2 sin2, Y2 = X2 cos2 - X1 sin1: the gradient of X. One pass each way, where the
// exported chain took two Slices, a Neg, a Concat, two products and a sum (and their seven gradients).
// Under autocast (16-bit X, float32 cos and sin) X is read up-cast, and Y is written in cos's dtype or in the dtype
// of attribute `to`: the casts around it folded in (passes/rotary_embedding_fusion.cpp), computed in float32 and
// rounded once, as the casts would.
#include <optional>

#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

class RotaryEmbeddingOp : public Op {
 public:
  explicit RotaryEmbeddingOp(const ir::Node& n) : transposed_(n.attr_int("transposed", 0) != 0) {
    if (n.attrs.count("to")) to_ = n.attr_int("to", 0);
  }
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.empty() || !x.back().is_const() || x.back().value() % 2)
      ctx.fail("X " + shape_str(x) + " needs a last dim of even, known size");
    const DType c = ctx.dtype(1);
    if (ctx.dtype(0) != c && !(c == DType::kFloat32 && dtype_is_16bit_float(ctx.dtype(0))))
      ctx.fail("X of " + dtype_name(ctx.dtype(0)) + " and cos of " + dtype_name(c) +
               ": X must be of cos's dtype, or of 16 bits with float32 cos and sin");
    for (size_t i = 1; i < 3; ++i) {
      const Shape& t = ctx.shape(i);
      if (ctx.dtype(i) != c || t.size() > x.size() || t.empty() || t.back() != x.back())
        ctx.fail("input " + std::to_string(i) + " " + shape_str(t) + " must be cos's dtype and broadcast to X " +
                 shape_str(x) + " with its last dim");
      for (size_t d = 0; d + 1 < t.size(); ++d) {
        const Dim& td = t[t.size() - 1 - d - 1];
        const Dim& xd = x[x.size() - 1 - d - 1];
        if (!(td == xd) && !(td == Dim(1)))
          ctx.fail("input " + std::to_string(i) + " " + shape_str(t) + " does not broadcast to X " + shape_str(x));
      }
    }
    const DType y = to_ ? DType(*to_) : c;
    if (y != c && !(c == DType::kFloat32 && dtype_is_16bit_float(y)))
      ctx.fail("Y of " + dtype_name(y) + " with cos of " + dtype_name(c) +
               ": Y must be of cos's dtype, or of 16 bits with float32 cos and sin");
    ctx.set(0, y, x);
  }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(3) : Dim(0);
  }
  // dX: the transposed map of dY, in X's dtype; dcos = dY X, dsin = dY rotate_half(X) (RotaryEmbedding(X, 0, 1)),
  // in cos's dtype, each summed over what broadcasting added.
  void grad(GradCtx& g) const override {
    if (transposed_) throw UnsupportedError(g.node().where() + ": no gradient of the transposed rotary embedding");
    ir::Value *x = g.x(0), *dy = g.dy(0), *cos = g.x(1);
    auto rotary = [&](ir::Value* v, ir::Value* c, ir::Value* s, int64_t transposed, DType to) {
      return g.ops("RotaryEmbedding", {v, c, s}, 1, {{"transposed", transposed}, {"to", int64_t(to)}},
                   "com.onnxtrain")[0];
    };
    if (g.needs(0)) g.set_dx(0, rotary(dy, cos, g.x(2), 1, x->dtype));
    if (!g.needs(1) && !g.needs(2)) return;
    ir::Value* dy_c = dy->dtype == cos->dtype ? dy : g.cast(dy, cos->dtype);
    ir::Value* x_c = x->dtype == cos->dtype ? x : g.cast(x, cos->dtype);
    if (g.needs(1)) g.set_dx(1, g.mul(dy_c, x_c));
    if (g.needs(2)) {
      ir::Value* row = g.ints({x->shape.back().value()});
      g.set_dx(2, g.mul(dy_c, rotary(x_c, g.expand(g.like(0, x_c), row), g.expand(g.like(1, x_c), row), 0,
                                     cos->dtype)));
    }
  }

 private:
  bool transposed_;
  std::optional<int64_t> to_;
};

const bool kRegistered = register_ops({{"com.onnxtrain", "RotaryEmbedding", factory<RotaryEmbeddingOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
