// Elementwise ops of one input: each is a functor line; the loop and the dtype
// dispatch are written once in UnaryOp.
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/vector_math.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

using kernels::dispatch;

// A functor with a float32 array kernel (see kernels/cpu/vector_math.h).
template <typename F>
concept HasVector = requires(const F f, const float* x, float* y, int64_t n) { f.vector(x, y, n); };

template <typename F, int Types>
class UnaryOp : public Op {
 public:
  explicit UnaryOp(const ir::Node& n) : f_(n) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
  void compute(ComputeCtx& c) const override {
    dispatch<Types>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = c.in(0).data<T>();
      T* y = c.out(0).data<T>();
      parallel_for(c.in(0).numel(), 8, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float> && HasVector<F>) {
          if (f_.vector(x + b, y + b, e - b)) return;
        }
        for (int64_t i = b; i < e; ++i) y[i] = f_(x[i]);
      });
    });
  }
  int inplace_input() const override { return 0; }
  void grad(GradCtx& g) const override {
    if (ir::Value* dy = g.dy(0)) g.set_dx(0, f_.grad(g, g.x(0), g.y(0), dy));
  }

 private:
  F f_;
};

constexpr int kF = kernels::kFloats;
constexpr int kN = kernels::kNumeric;

using ir::Value;

// A stateless functor computing EXPR of x, its gradient GRAD (graph nodes built
// with g from x, y = f(x) and dy; nullptr when the gradient is zero), and its registration.
// OT_UNARY_VEC adds VEC, a float32 array kernel.
#define OT_UNARY_IMPL(NAME, TYPES, EXPR, GRAD, EXTRA)                  \
  struct NAME##Fn {                                                    \
    explicit NAME##Fn(const ir::Node&) {}                              \
    template <typename T>                                              \
    T operator()(T x) const {                                          \
      return EXPR;                                                     \
    }                                                                  \
    Value* grad(GradCtx& g, Value* x, Value* y, Value* dy) const {     \
      return GRAD;                                                     \
    }                                                                  \
    EXTRA                                                              \
  };                                                                   \
  using NAME##Op = UnaryOp<NAME##Fn, TYPES>;                           \
  OT_REGISTER_OP(#NAME, NAME##Op)
#define OT_UNARY(NAME, TYPES, EXPR, GRAD) OT_UNARY_IMPL(NAME, TYPES, EXPR, GRAD, )
#define OT_UNARY_VEC(NAME, TYPES, EXPR, GRAD, VEC) \
  OT_UNARY_IMPL(NAME, TYPES, EXPR, GRAD, bool vector(const float* x, float* y, int64_t n) const { VEC(x, y, n); return true; })

Value* square(GradCtx& g, Value* v) { return g.mul(v, v); }
Value* positive(GradCtx& g, Value* x) { return g.op("Greater", {x, g.like(0, x)}); }

OT_UNARY(Abs, kN, std::is_signed_v<T> ? (x < 0 ? T(-x) : x) : x, g.mul(dy, g.op("Sign", {x})));
OT_UNARY(Neg, kN, T(-x), g.neg(dy));
OT_UNARY_VEC(Exp, kF, std::exp(x), g.mul(dy, y), kernels::exp_f32);
OT_UNARY(Log, kF, std::log(x), g.div(dy, x));
OT_UNARY(Sqrt, kF, std::sqrt(x), g.div(g.mul(dy, g.like(0.5, dy)), y));
OT_UNARY(Reciprocal, kF, T(1) / x, g.neg(g.mul(dy, square(g, y))));
OT_UNARY(Tanh, kF, std::tanh(x), g.mul(dy, g.sub(g.like(1, y), square(g, y))));
OT_UNARY(Sigmoid, kF, x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)), g.mul(dy, g.mul(y, g.sub(g.like(1, y), y))));
OT_UNARY(Relu, kN, x > T(0) ? x : T(0), g.where_or_zero(positive(g, x), dy));
OT_UNARY(Softsign, kF, x / (T(1) + std::abs(x)), g.div(dy, square(g, g.add(g.like(1, x), g.op("Abs", {x})))));
OT_UNARY(Softplus, kF, x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)), g.mul(dy, g.op("Sigmoid", {x})));
OT_UNARY_VEC(Erf, kF, std::erf(x), g.mul(dy, g.mul(g.like(1.1283791670955126, x), g.op("Exp", {g.neg(square(g, x))}))),
             kernels::erf_f32);
OT_UNARY(Sin, kF, std::sin(x), g.mul(dy, g.op("Cos", {x})));
OT_UNARY(Cos, kF, std::cos(x), g.neg(g.mul(dy, g.op("Sin", {x}))));
OT_UNARY(Tan, kF, std::tan(x), g.mul(dy, g.add(g.like(1, y), square(g, y))));
OT_UNARY(Asin, kF, std::asin(x), g.div(dy, g.op("Sqrt", {g.sub(g.like(1, x), square(g, x))})));
OT_UNARY(Acos, kF, std::acos(x), g.neg(g.div(dy, g.op("Sqrt", {g.sub(g.like(1, x), square(g, x))}))));
OT_UNARY(Atan, kF, std::atan(x), g.div(dy, g.add(g.like(1, x), square(g, x))));
OT_UNARY(Sinh, kF, std::sinh(x), g.mul(dy, g.op("Cosh", {x})));
OT_UNARY(Cosh, kF, std::cosh(x), g.mul(dy, g.op("Sinh", {x})));
OT_UNARY(Asinh, kF, std::asinh(x), g.div(dy, g.op("Sqrt", {g.add(square(g, x), g.like(1, x))})));
OT_UNARY(Acosh, kF, std::acosh(x), g.div(dy, g.op("Sqrt", {g.sub(square(g, x), g.like(1, x))})));
OT_UNARY(Atanh, kF, std::atanh(x), g.div(dy, g.sub(g.like(1, x), square(g, x))));
OT_UNARY(Floor, kF, std::floor(x), nullptr);
OT_UNARY(Ceil, kF, std::ceil(x), nullptr);
OT_UNARY(Round, kF, std::nearbyint(x), nullptr);  // the default rounding mode rounds half to even
OT_UNARY(Sign, kN, T((x > T(0)) - (x < T(0))), nullptr);
OT_UNARY(HardSwish, kF, x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5))), g.op("Where", {g.op("Less", {x, g.like(-3, x)}), g.like(0, dy), g.op("Where", {g.op("Greater", {x, g.like(3, x)}), dy, g.mul(dy, g.div(g.add(g.mul(g.like(2, x), x), g.like(3, x)), g.like(6, x)))})}));
OT_UNARY(Not, kernels::kBool, !x, nullptr);
#undef OT_UNARY

struct LeakyReluFn {
  explicit LeakyReluFn(const ir::Node& n) : alpha(n.attr_float("alpha", 0.01f)) {}
  template <typename T>
  T operator()(T x) const { return x >= 0 ? x : T(alpha) * x; }
  Value* grad(GradCtx& g, Value* x, Value*, Value* dy) const {
    return g.op("Where", {positive(g, x), dy, g.mul(dy, g.like(alpha, dy))});
  }
  float alpha;
};
using LeakyReluOp = UnaryOp<LeakyReluFn, kF>;
OT_REGISTER_OP("LeakyRelu", LeakyReluOp);

struct EluFn {
  explicit EluFn(const ir::Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <typename T>
  T operator()(T x) const { return x >= 0 ? x : T(alpha) * std::expm1(x); }
  Value* grad(GradCtx& g, Value* x, Value* y, Value* dy) const {
    return g.op("Where", {positive(g, x), dy, g.mul(dy, g.add(y, g.like(alpha, y)))});
  }
  float alpha;
};
using EluOp = UnaryOp<EluFn, kF>;
OT_REGISTER_OP("Elu", EluOp);

struct CeluFn {
  explicit CeluFn(const ir::Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <typename T>
  T operator()(T x) const { return std::max(T(0), x) + std::min(T(0), T(alpha) * std::expm1(x / T(alpha))); }
  Value* grad(GradCtx& g, Value* x, Value*, Value* dy) const {
    return g.op("Where", {positive(g, x), dy, g.mul(dy, g.op("Exp", {g.div(x, g.like(alpha, x))}))});
  }
  float alpha;
};
using CeluOp = UnaryOp<CeluFn, kF>;
OT_REGISTER_OP("Celu", CeluOp);

struct SeluFn {
  explicit SeluFn(const ir::Node& n)
      : alpha(n.attr_float("alpha", 1.67326319217681884765625f)), gamma(n.attr_float("gamma", 1.05070102214813232421875f)) {}
  template <typename T>
  T operator()(T x) const { return T(gamma) * (x > 0 ? x : T(alpha) * std::expm1(x)); }
  Value* grad(GradCtx& g, Value* x, Value* y, Value* dy) const {
    return g.op("Where", {positive(g, x), g.mul(dy, g.like(gamma, dy)), g.mul(dy, g.add(y, g.like(double(alpha) * gamma, y)))});
  }
  float alpha, gamma;
};
using SeluOp = UnaryOp<SeluFn, kF>;
OT_REGISTER_OP("Selu", SeluOp);

struct HardSigmoidFn {
  explicit HardSigmoidFn(const ir::Node& n) : alpha(n.attr_float("alpha", 0.2f)), beta(n.attr_float("beta", 0.5f)) {}
  template <typename T>
  T operator()(T x) const { return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta))); }
  Value* grad(GradCtx& g, Value* x, Value*, Value* dy) const {
    Value* z = g.add(g.mul(x, g.like(alpha, x)), g.like(beta, x));
    Value* inside = g.op("And", {g.op("Greater", {z, g.like(0, z)}), g.op("Less", {z, g.like(1, z)})});
    return g.where_or_zero(inside, g.mul(dy, g.like(alpha, dy)));
  }
  float alpha, beta;
};
using HardSigmoidOp = UnaryOp<HardSigmoidFn, kF>;
OT_REGISTER_OP("HardSigmoid", HardSigmoidOp);

struct ThresholdedReluFn {
  explicit ThresholdedReluFn(const ir::Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <typename T>
  T operator()(T x) const { return x > T(alpha) ? x : T(0); }
  Value* grad(GradCtx& g, Value* x, Value*, Value* dy) const {
    return g.where_or_zero(g.op("Greater", {x, g.like(alpha, x)}), dy);
  }
  float alpha;
};
using ThresholdedReluOp = UnaryOp<ThresholdedReluFn, kF>;
OT_REGISTER_OP("ThresholdedRelu", ThresholdedReluOp);

struct GeluFn {
  explicit GeluFn(const ir::Node& n) : tanh_approx(n.attr_string("approximate", "none") == "tanh") {
    std::string a = n.attr_string("approximate", "none");
    if (a != "none" && a != "tanh") throw UnsupportedError(n.where() + ": approximate='" + a + "' is not supported");
  }
  template <typename T>
  T operator()(T x) const {
    if (tanh_approx)
      return T(0.5) * x * (T(1) + std::tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
    return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
  }
  bool vector(const float* x, float* y, int64_t n) const {
    if (tanh_approx) return false;
    kernels::gelu_f32(x, y, n);
    return true;
  }
  Value* grad(GradCtx& g, Value* x, Value*, Value* dy) const {
    if (tanh_approx) {  // d/dx 0.5x(1+t), t = tanh(k(x + c x^3))
      Value* x2 = square(g, x);
      Value* t = g.op("Tanh", {g.mul(g.like(0.7978845608028654, x), g.add(x, g.mul(g.like(0.044715, x), g.mul(x2, x))))});
      Value* dt = g.mul(g.sub(g.like(1, t), square(g, t)),
                        g.mul(g.like(0.7978845608028654, x), g.add(g.like(1, x), g.mul(g.like(3 * 0.044715, x), x2))));
      Value* d = g.add(g.mul(g.like(0.5, t), g.add(g.like(1, t), t)), g.mul(g.mul(g.like(0.5, x), x), dt));
      return g.mul(dy, d);
    }
    return g.ops("GeluGrad", {dy, x}, 1, {}, "com.onnxtrain")[0];  // dy (Phi(x) + x phi(x)) in one pass
  }
  bool tanh_approx;
};
using GeluOp = UnaryOp<GeluFn, kF>;
OT_REGISTER_OP("Gelu", GeluOp);

// com.onnxtrain.GeluGrad(dy, x) = dy (Phi(x) + x phi(x)): the gradient of exact GELU in one pass; composed of
// ordinary ops it took ten passes over the activation (Erf, Exp and their products).
class GeluGradOp : public Op {
 public:
  explicit GeluGradOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  int inplace_input() const override { return 0; }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) != ctx.rank(1)) ctx.fail("dy " + shape_str(ctx.shape(0)) + " and x " + shape_str(ctx.shape(1)) + " differ");
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
  }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(20) : Dim(0);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &dy = c.in(0), &x = c.in(1);
    check_same(c, x, dy);
    dispatch<kF>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *d = dy.data<T>(), *xp = x.data<T>();
      T* out = c.out(0).data<T>();
      parallel_for(x.numel(), 30, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float>) {
          kernels::gelu_grad_f32(d + b, xp + b, out + b, e - b);
        } else {
          for (int64_t i = b; i < e; ++i) out[i] = d[i] * gelu_derivative(xp[i]);
        }
      });
    });
  }
  static void check_same(ComputeCtx& c, const Tensor& x, const Tensor& dy) {
    if (dy.numel() != x.numel() || dy.dtype() != x.dtype())
      c.fail("dy " + dims_str(dy.dims()) + " and x " + dims_str(x.dims()) + " differ");
  }
  template <typename T>
  static T gelu_derivative(T x) {
    T cdf = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
    T pdf = T(0.3989422804014327) * std::exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
};
const bool kGeluGradRegistered = register_op("com.onnxtrain", "GeluGrad", factory<GeluGradOp>());

// com.onnxtrain.GeluAndGrad(dy, x) = (GeluGrad(dy, x), Gelu(x)), bit for bit, in one pass: where backward
// recomputes a GELU whose input its gradient reads anyway (gelu_recompute_fusion makes it), the recompute
// costs little more than the gradient alone. dx may take dy's buffer, as GeluGrad's does.
class GeluAndGradOp : public Op {
 public:
  explicit GeluAndGradOp(const ir::Node&) {}
  int inplace_input() const override { return 0; }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) != ctx.rank(1)) ctx.fail("dy " + shape_str(ctx.shape(0)) + " and x " + shape_str(ctx.shape(1)) + " differ");
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
    ctx.set(1, ctx.dtype(1), ctx.shape(1));
  }
  Dim flops(const ir::Node& n) const override {
    return n.outputs[0]->has_shape ? shape_numel(n.outputs[0]->shape) * Dim(24) : Dim(0);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &dy = c.in(0), &x = c.in(1);
    GeluGradOp::check_same(c, x, dy);
    dispatch<kF>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *d = dy.data<T>(), *xp = x.data<T>();
      T *dx = c.out(0).data<T>(), *y = c.out(1).data<T>();
      parallel_for(x.numel(), 40, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float>) {
          kernels::gelu_and_grad_f32(d + b, xp + b, dx + b, y + b, e - b);
        } else {
          const GeluFn gelu{c.node};
          for (int64_t i = b; i < e; ++i) y[i] = gelu(xp[i]), dx[i] = d[i] * GeluGradOp::gelu_derivative(xp[i]);
        }
      });
    });
  }
};
const bool kGeluAndGradRegistered = register_op("com.onnxtrain", "GeluAndGrad", factory<GeluAndGradOp>());

struct MishFn {
  explicit MishFn(const ir::Node&) {}
  template <typename T>
  T operator()(T x) const { return x * std::tanh(x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x))); }
  Value* grad(GradCtx& g, Value* x, Value*, Value* dy) const {  // tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)
    Value* t = g.op("Tanh", {g.op("Softplus", {x})});
    return g.mul(dy, g.add(t, g.mul(g.mul(x, g.op("Sigmoid", {x})), g.sub(g.like(1, t), square(g, t)))));
  }
};
using MishOp = UnaryOp<MishFn, kF>;
OT_REGISTER_OP("Mish", MishOp);

// Identity: a view of its input (the same memory, as PyTorch's nn.Identity returns the same tensor).
class IdentityOp : public Op {
 public:
  explicit IdentityOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0), ctx.value_opt(0)); }
  void compute(ComputeCtx&) const override {}
  bool is_view() const override { return true; }
  void grad(GradCtx& g) const override { g.set_dx(0, g.dy(0)); }
};
OT_REGISTER_OP("Identity", IdentityOp);

// IsNaN and IsInf: float in, bool out.
class IsNaNOp : public Op {
 public:
  explicit IsNaNOp(const ir::Node& n)
      : inf_(n.op_type == "IsInf"), pos_(n.attr_int("detect_positive", 1)), neg_(n.attr_int("detect_negative", 1)) {}
  DType output_dtype(size_t, const std::vector<DType>&) const override { return DType::kBool; }
  void infer(InferCtx& ctx) const override { ctx.set(0, DType::kBool, ctx.shape(0)); }
  void compute(ComputeCtx& c) const override {
    dispatch<kF>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = c.in(0).data<T>();
      bool* y = c.out(0).data<bool>();
      for (int64_t i = 0; i < c.in(0).numel(); ++i)
        y[i] = inf_ ? (std::isinf(x[i]) && ((x[i] > 0 && pos_) || (x[i] < 0 && neg_))) : std::isnan(x[i]);
    });
  }

 private:
  bool inf_, pos_, neg_;
};
OT_REGISTER_OP("IsNaN", IsNaNOp);
OT_REGISTER_OP("IsInf", IsNaNOp);

}  // namespace
}  // namespace onnxtrain::ops
