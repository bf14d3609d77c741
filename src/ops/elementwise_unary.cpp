// Elementwise ops of one input: each op is a line of the table below with its gradient (built from x,
// y = f(x) and dy; nullptr where the gradient is zero); the kernels are in kernels/cpu/elementwise_unary.cpp.
#include <cmath>
#include <map>

#include "onnxtrain/error.h"
#include "ops/elementwise.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

using ir::Value;
using UnaryGrad = Value* (*)(GradCtx& g, const UnaryAttrs& a, Value* x, Value* y, Value* dy);

// Gelu's and GeluGrad's attribute `approximate`: "none" or "tanh".
UnaryAttrs gelu_form(const ir::Node& n) {
  UnaryAttrs a;
  std::string approx = n.attr_string("approximate", "none");
  if (approx != "none" && approx != "tanh")
    throw UnsupportedError(n.where() + ": approximate='" + approx + "' is not supported");
  a.tanh_approx = approx == "tanh";
  return a;
}

// Each op's attributes with its defaults (ONNX's) applied.
UnaryAttrs unary_attrs(const ir::Node& n) {
  static const std::map<std::string, UnaryAttrs> defaults = {
      {"LeakyRelu", {0.01f}},
      {"Elu", {1.0f}},
      {"Celu", {1.0f}},
      {"ThresholdedRelu", {1.0f}},
      {"HardSigmoid", {0.2f, 0.5f}},
      {"Selu", {1.67326319217681884765625f, 0, 1.05070102214813232421875f}}};
  auto it = defaults.find(n.op_type);
  UnaryAttrs a = it == defaults.end() ? UnaryAttrs{} : it->second;
  a.alpha = n.attr_float("alpha", a.alpha);
  a.beta = n.attr_float("beta", a.beta);
  a.gamma = n.attr_float("gamma", a.gamma);
  if (n.op_type == "Gelu") a.tanh_approx = gelu_form(n).tanh_approx;
  return a;
}

class UnaryOp : public OpWith<UnaryAttrs> {
 public:
  UnaryOp(const ir::Node& n, UnaryGrad grad) : OpWith(unary_attrs(n)), grad_(grad) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
  int inplace_input() const override { return 0; }
  void grad(GradCtx& g) const override {
    if (Value* dy = g.dy(0)) g.set_dx(0, grad_(g, attrs, g.x(0), g.y(0), dy));
  }

 private:
  UnaryGrad grad_;
};

OpDef unary(const std::string& name, UnaryGrad grad) {
  return {"", name, [grad](const ir::Node& n) { return std::make_shared<const UnaryOp>(n, grad); }};
}

Value* square(GradCtx& g, Value* v) { return g.mul(v, v); }
Value* positive(GradCtx& g, Value* x) { return g.greater(x, g.like(0, x)); }

// GELU's gradient: one com.onnxtrain.GeluGrad, of the exact or the tanh form.
Value* gelu_grad(GradCtx& g, const UnaryAttrs& a, Value* x, Value*, Value* dy) {
  ir::Attributes form;
  if (a.tanh_approx) form["approximate"] = std::string("tanh");
  return g.ops("GeluGrad", {dy, x}, 1, form, "com.onnxtrain")[0];
}

Value* hard_swish_grad(GradCtx& g, const UnaryAttrs&, Value* x, Value*, Value* dy) {
  Value* mid = g.mul(dy, g.div(g.add(g.mul(g.like(2, x), x), g.like(3, x)), g.like(6, x)));
  return g.where(g.less(x, g.like(-3, x)), g.like(0, dy), g.where(g.greater(x, g.like(3, x)), dy, mid));
}

Value* hard_sigmoid_grad(GradCtx& g, const UnaryAttrs& a, Value* x, Value*, Value* dy) {
  Value* z = g.add(g.mul(x, g.like(a.alpha, x)), g.like(a.beta, x));
  Value* inside = g.logical_and(g.greater(z, g.like(0, z)), g.less(z, g.like(1, z)));
  return g.where_or_zero(inside, g.mul(dy, g.like(a.alpha, dy)));
}

Value* mish_grad(GradCtx& g, const UnaryAttrs&, Value* x, Value*,
                 Value* dy) {  // tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)
  Value* t = g.tanh(g.op("Softplus", {x}));
  return g.mul(dy, g.add(t, g.mul(g.mul(x, g.sigmoid(x)), g.sub(g.like(1, t), square(g, t)))));
}

// A gradient rule as an expression of g, a (the attributes), x, y and dy.
#define OT_GRAD(EXPR) [](GradCtx& g, const UnaryAttrs& a, Value* x, Value* y, Value* dy) -> Value* { return EXPR; }
Value* kNone = nullptr;

const bool kUnaryRegistered = register_ops({
    unary("Abs", OT_GRAD(g.mul(dy, g.sign(x)))),
    unary("Neg", OT_GRAD(g.neg(dy))),
    unary("Exp", OT_GRAD(g.mul(dy, y))),
    unary("Log", OT_GRAD(g.div(dy, x))),
    unary("Sqrt", OT_GRAD(g.div(g.mul(dy, g.like(0.5, dy)), y))),
    unary("Reciprocal", OT_GRAD(g.neg(g.mul(dy, square(g, y))))),
    unary("Tanh", OT_GRAD(g.mul(dy, g.sub(g.like(1, y), square(g, y))))),
    unary("Sigmoid", OT_GRAD(g.mul(dy, g.mul(y, g.sub(g.like(1, y), y))))),
    unary("Relu", OT_GRAD(g.where_or_zero(positive(g, x), dy))),
    unary("Softsign", OT_GRAD(g.div(dy, square(g, g.add(g.like(1, x), g.op("Abs", {x})))))),
    unary("Softplus", OT_GRAD(g.mul(dy, g.sigmoid(x)))),
    unary("Erf", OT_GRAD(g.mul(dy, g.mul(g.like(1.1283791670955126, x), g.exp(g.neg(square(g, x))))))),
    unary("Sin", OT_GRAD(g.mul(dy, g.op("Cos", {x})))),
    unary("Cos", OT_GRAD(g.neg(g.mul(dy, g.op("Sin", {x}))))),
    unary("Tan", OT_GRAD(g.mul(dy, g.add(g.like(1, y), square(g, y))))),
    unary("Asin", OT_GRAD(g.div(dy, g.sqrt(g.sub(g.like(1, x), square(g, x)))))),
    unary("Acos", OT_GRAD(g.neg(g.div(dy, g.sqrt(g.sub(g.like(1, x), square(g, x))))))),
    unary("Atan", OT_GRAD(g.div(dy, g.add(g.like(1, x), square(g, x))))),
    unary("Sinh", OT_GRAD(g.mul(dy, g.op("Cosh", {x})))),
    unary("Cosh", OT_GRAD(g.mul(dy, g.op("Sinh", {x})))),
    unary("Asinh", OT_GRAD(g.div(dy, g.sqrt(g.add(square(g, x), g.like(1, x)))))),
    unary("Acosh", OT_GRAD(g.div(dy, g.sqrt(g.sub(square(g, x), g.like(1, x)))))),
    unary("Atanh", OT_GRAD(g.div(dy, g.sub(g.like(1, x), square(g, x))))),
    unary("Floor", OT_GRAD(kNone)),
    unary("Ceil", OT_GRAD(kNone)),
    unary("Round", OT_GRAD(kNone)),
    unary("Sign", OT_GRAD(kNone)),
    unary("Not", OT_GRAD(kNone)),
    unary("HardSwish", hard_swish_grad),
    unary("LeakyRelu", OT_GRAD(g.where(positive(g, x), dy, g.mul(dy, g.like(a.alpha, dy))))),
    unary("Elu", OT_GRAD(g.where(positive(g, x), dy, g.mul(dy, g.add(y, g.like(a.alpha, y)))))),
    unary("Celu", OT_GRAD(g.where(positive(g, x), dy, g.mul(dy, g.exp(g.div(x, g.like(a.alpha, x))))))),
    unary("Selu", OT_GRAD(g.where(positive(g, x), g.mul(dy, g.like(a.gamma, dy)),
                                  g.mul(dy, g.add(y, g.like(double(a.alpha) * a.gamma, y)))))),
    unary("HardSigmoid", hard_sigmoid_grad),
    unary("ThresholdedRelu", OT_GRAD(g.where_or_zero(g.greater(x, g.like(a.alpha, x)), dy))),
    unary("Gelu", gelu_grad),
    unary("Mish", mish_grad),
});
#undef OT_GRAD

// com.onnxtrain.GeluGrad(dy, x) = dy (Phi(x) + x phi(x)): the gradient of exact GELU in one pass (of its tanh form
// with approximate="tanh", as Gelu's attribute); composed of ordinary ops it took ten passes over the activation.
class GeluGradOp : public OpWith<UnaryAttrs> {
 public:
  explicit GeluGradOp(const ir::Node& n) : OpWith(gelu_form(n)) {}
  bool recomputable() const override { return true; }
  int inplace_input() const override { return 0; }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) != ctx.rank(1))
      ctx.fail("dy " + shape_str(ctx.shape(0)) + " and x " + shape_str(ctx.shape(1)) + " differ");
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
  }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(20) : Dim(0);
  }
};

// com.onnxtrain.GeluAndGrad(dy, x) = (GeluGrad(dy, x), Gelu(x)) of one form (attribute `approximate`, as Gelu's),
// bit for bit, in one pass: where backward
// recomputes a GELU whose input its gradient reads anyway (gelu_recompute_fusion makes it), the recompute
// costs little more than the gradient alone. dx may take dy's buffer, as GeluGrad's does, and y x's: the recompute
// then allocates nothing (x's last reader is this node, typically).
class GeluAndGradOp : public OpWith<UnaryAttrs> {
 public:
  explicit GeluAndGradOp(const ir::Node& n) : OpWith(gelu_form(n)) {}
  int inplace_input_of(size_t i) const override { return i < 2 ? int(i) : -1; }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) != ctx.rank(1))
      ctx.fail("dy " + shape_str(ctx.shape(0)) + " and x " + shape_str(ctx.shape(1)) + " differ");
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
    ctx.set(1, ctx.dtype(1), ctx.shape(1));
  }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(24) : Dim(0);
  }
};

// Identity: a view of its input (the same memory, as PyTorch's nn.Identity returns the same tensor).
class IdentityOp : public Op {
 public:
  explicit IdentityOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0), ctx.propagated_opt(0)); }
  bool is_view() const override { return true; }
  void grad(GradCtx& g) const override { g.set_dx(0, g.dy(0)); }
};

// com.onnxtrain.StopGradient: its input, through which no gradient flows (PyTorch's detach); a view.
class StopGradientOp : public IdentityOp {
 public:
  using IdentityOp::IdentityOp;
  bool differentiable_output(size_t) const override { return false; }
};

// IsNaN and IsInf: float in, bool out.
class IsNaNOp : public OpWith<IsInfAttrs> {
 public:
  explicit IsNaNOp(const ir::Node& n)
      : OpWith({n.attr_int("detect_positive", 1) != 0, n.attr_int("detect_negative", 1) != 0}) {}
  DType output_dtype(size_t, const std::vector<DType>&) const override { return DType::kBool; }
  void infer(InferCtx& ctx) const override { ctx.set(0, DType::kBool, ctx.shape(0)); }
};

const bool kRegistered = register_ops({
    {"com.onnxtrain", "GeluGrad", factory<GeluGradOp>()},
    {"com.onnxtrain", "GeluAndGrad", factory<GeluAndGradOp>()},
    {"", "Identity", factory<IdentityOp>()},
    {"com.onnxtrain", "StopGradient", factory<StopGradientOp>()},
    {"", "IsNaN", factory<IsNaNOp>()},
    {"", "IsInf", factory<IsNaNOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
