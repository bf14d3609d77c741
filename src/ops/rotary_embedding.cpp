// com.onnxtrain.RotaryEmbedding(X, cos, sin) = X cos + rotate_half(X) sin, rotate_half(X) = concat(-X2, X1) of X's
// halves X1, X2 on the last dim (Llama's, Qwen2's, Mistral's rotary position embedding of queries and keys):
// Y1 = X1 cos1 - X2 sin1, Y2 = X2 cos2 + X1 sin2, cos and sin broadcast to X. With transposed=1 it applies the
// transposed map, Y1 = X1 cos1 + X2 sin2, Y2 = X2 cos2 - X1 sin1: the gradient of X. One pass each way, where the
// exported chain took two Slices, a Neg, a Concat, two products and a sum (and their seven gradients).
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

class RotaryEmbeddingOp : public Op {
 public:
  explicit RotaryEmbeddingOp(const ir::Node& n) : transposed_(n.attr_int("transposed", 0) != 0) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.empty() || !x.back().is_const() || x.back().value() % 2)
      ctx.fail("X " + shape_str(x) + " needs a last dim of even, known size");
    for (size_t i = 1; i < 3; ++i) {
      const Shape& t = ctx.shape(i);
      if (ctx.dtype(i) != ctx.dtype(0) || t.size() > x.size() || t.empty() || t.back() != x.back())
        ctx.fail("input " + std::to_string(i) + " " + shape_str(t) + " must be X's dtype and broadcast to X " +
                 shape_str(x) + " with its last dim");
      for (size_t d = 0; d + 1 < t.size(); ++d) {
        const Dim& td = t[t.size() - 1 - d - 1];
        const Dim& xd = x[x.size() - 1 - d - 1];
        if (!(td == xd) && !(td == Dim(1)))
          ctx.fail("input " + std::to_string(i) + " " + shape_str(t) + " does not broadcast to X " + shape_str(x));
      }
    }
    ctx.set(0, ctx.dtype(0), x);
  }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(3) : Dim(0);
  }
  // dX: the transposed map of dY; dcos = dY X, dsin = dY rotate_half(X) (RotaryEmbedding(X, 0, 1)), each summed
  // over what broadcasting added.
  void grad(GradCtx& g) const override {
    if (transposed_) throw UnsupportedError(g.node().where() + ": no gradient of the transposed rotary embedding");
    ir::Value *x = g.x(0), *dy = g.dy(0);
    auto rotary = [&](ir::Value* v, ir::Value* cos, ir::Value* sin, int64_t transposed) {
      return g.ops("RotaryEmbedding", {v, cos, sin}, 1, {{"transposed", transposed}}, "com.onnxtrain")[0];
    };
    if (g.needs(0)) g.set_dx(0, rotary(dy, g.x(1), g.x(2), 1));
    if (g.needs(1)) g.set_dx(1, g.mul(dy, x));
    if (g.needs(2)) {
      ir::Value* row = g.ints({x->shape.back().value()});
      g.set_dx(2, g.mul(dy, rotary(x, g.expand(g.like(0, x), row), g.expand(g.like(1, x), row), 0)));
    }
  }

 private:
  bool transposed_;
};

const bool kRegistered = register_ops({{"com.onnxtrain", "RotaryEmbedding", factory<RotaryEmbeddingOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
