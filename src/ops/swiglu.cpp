// com.onnxtrain.SwiGLU(gate, up) = silu(gate) * up = gate * sigmoid(gate) * up (Llama's, Qwen2's, Mistral's MLP), and
// its gradient com.onnxtrain.SwiGLUGrad(dY, gate, up) -> (dgate, dup): one pass each way over the MLP's widest
// activation, where the chain of Sigmoid and two products took three and stashed four values of that size.
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

void same_shapes(InferCtx& ctx, size_t a, size_t b) {
  if (ctx.shape(a) != ctx.shape(b) || ctx.dtype(a) != ctx.dtype(b))
    ctx.fail("inputs " + std::to_string(a) + " " + shape_str(ctx.shape(a)) + " and " + std::to_string(b) + " " +
             shape_str(ctx.shape(b)) + " differ in shape or dtype");
}

class SwiGLUOp : public Op {
 public:
  explicit SwiGLUOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    same_shapes(ctx, 0, 1);
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
  }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(8) : Dim(0);
  }
  void grad(GradCtx& g) const override {
    auto d = g.ops("SwiGLUGrad", {g.dy(0), g.x(0), g.x(1)}, 2, {}, "com.onnxtrain");
    for (size_t i = 0; i < 2; ++i)
      if (g.needs(i)) g.set_dx(i, d[i]);
  }
};

// dup = dY silu(gate); dgate = dY up s (1 + gate (1 - s)), s = sigmoid(gate).
class SwiGLUGradOp : public Op {
 public:
  explicit SwiGLUGradOp(const ir::Node&) {}
  void infer(InferCtx& ctx) const override {
    same_shapes(ctx, 0, 1);
    same_shapes(ctx, 1, 2);
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
    ctx.set(1, ctx.dtype(2), ctx.shape(2));
  }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(12) : Dim(0);
  }
};

const bool kRegistered = register_ops({
    {"com.onnxtrain", "SwiGLU", factory<SwiGLUOp>()},
    {"com.onnxtrain", "SwiGLUGrad", factory<SwiGLUGradOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
