// Elementwise ops of one input: each is a functor line; the loop and the dtype
// dispatch are written once in UnaryOp.
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

using kernels::dispatch;

template <typename F, int Types>
class UnaryOp : public Op {
 public:
  explicit UnaryOp(const ir::Node& n) : f_(n) {}
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
  void compute(ComputeCtx& c) const override {
    dispatch<Types>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = c.in(0).data<T>();
      T* y = c.out(0).data<T>();
      parallel_for(c.in(0).numel(), 8, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = f_(x[i]);
      });
    });
  }
  int inplace_input() const override { return 0; }

 private:
  F f_;
};

constexpr int kF = kernels::kFloats;
constexpr int kN = kernels::kNumeric;

// A stateless functor computing EXPR of x, and its registration.
#define OT_UNARY(NAME, TYPES, EXPR)                                  \
  struct NAME##Fn {                                                  \
    explicit NAME##Fn(const ir::Node&) {}                            \
    template <typename T>                                            \
    T operator()(T x) const {                                        \
      return EXPR;                                                   \
    }                                                                \
  };                                                                 \
  using NAME##Op = UnaryOp<NAME##Fn, TYPES>;                         \
  OT_REGISTER_OP(#NAME, NAME##Op)

OT_UNARY(Abs, kN, std::is_signed_v<T> ? (x < 0 ? T(-x) : x) : x);
OT_UNARY(Neg, kN, T(-x));
OT_UNARY(Exp, kF, std::exp(x));
OT_UNARY(Log, kF, std::log(x));
OT_UNARY(Sqrt, kF, std::sqrt(x));
OT_UNARY(Reciprocal, kF, T(1) / x);
OT_UNARY(Tanh, kF, std::tanh(x));
OT_UNARY(Sigmoid, kF, x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)));
OT_UNARY(Relu, kN, x > T(0) ? x : T(0));
OT_UNARY(Softsign, kF, x / (T(1) + std::abs(x)));
OT_UNARY(Softplus, kF, x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)));
OT_UNARY(Erf, kF, std::erf(x));
OT_UNARY(Sin, kF, std::sin(x));
OT_UNARY(Cos, kF, std::cos(x));
OT_UNARY(Tan, kF, std::tan(x));
OT_UNARY(Asin, kF, std::asin(x));
OT_UNARY(Acos, kF, std::acos(x));
OT_UNARY(Atan, kF, std::atan(x));
OT_UNARY(Sinh, kF, std::sinh(x));
OT_UNARY(Cosh, kF, std::cosh(x));
OT_UNARY(Asinh, kF, std::asinh(x));
OT_UNARY(Acosh, kF, std::acosh(x));
OT_UNARY(Atanh, kF, std::atanh(x));
OT_UNARY(Floor, kF, std::floor(x));
OT_UNARY(Ceil, kF, std::ceil(x));
OT_UNARY(Round, kF, std::nearbyint(x));  // the default rounding mode rounds half to even
OT_UNARY(Sign, kN, T((x > T(0)) - (x < T(0))));
OT_UNARY(HardSwish, kF, x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5))));
OT_UNARY(Not, kernels::kBool, !x);
#undef OT_UNARY

struct LeakyReluFn {
  explicit LeakyReluFn(const ir::Node& n) : alpha(n.attr_float("alpha", 0.01f)) {}
  template <typename T>
  T operator()(T x) const { return x >= 0 ? x : T(alpha) * x; }
  float alpha;
};
using LeakyReluOp = UnaryOp<LeakyReluFn, kF>;
OT_REGISTER_OP("LeakyRelu", LeakyReluOp);

struct EluFn {
  explicit EluFn(const ir::Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <typename T>
  T operator()(T x) const { return x >= 0 ? x : T(alpha) * std::expm1(x); }
  float alpha;
};
using EluOp = UnaryOp<EluFn, kF>;
OT_REGISTER_OP("Elu", EluOp);

struct CeluFn {
  explicit CeluFn(const ir::Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <typename T>
  T operator()(T x) const { return std::max(T(0), x) + std::min(T(0), T(alpha) * std::expm1(x / T(alpha))); }
  float alpha;
};
using CeluOp = UnaryOp<CeluFn, kF>;
OT_REGISTER_OP("Celu", CeluOp);

struct SeluFn {
  explicit SeluFn(const ir::Node& n)
      : alpha(n.attr_float("alpha", 1.67326319217681884765625f)), gamma(n.attr_float("gamma", 1.05070102214813232421875f)) {}
  template <typename T>
  T operator()(T x) const { return T(gamma) * (x > 0 ? x : T(alpha) * std::expm1(x)); }
  float alpha, gamma;
};
using SeluOp = UnaryOp<SeluFn, kF>;
OT_REGISTER_OP("Selu", SeluOp);

struct HardSigmoidFn {
  explicit HardSigmoidFn(const ir::Node& n) : alpha(n.attr_float("alpha", 0.2f)), beta(n.attr_float("beta", 0.5f)) {}
  template <typename T>
  T operator()(T x) const { return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta))); }
  float alpha, beta;
};
using HardSigmoidOp = UnaryOp<HardSigmoidFn, kF>;
OT_REGISTER_OP("HardSigmoid", HardSigmoidOp);

struct ThresholdedReluFn {
  explicit ThresholdedReluFn(const ir::Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <typename T>
  T operator()(T x) const { return x > T(alpha) ? x : T(0); }
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
  bool tanh_approx;
};
using GeluOp = UnaryOp<GeluFn, kF>;
OT_REGISTER_OP("Gelu", GeluOp);

struct MishFn {
  explicit MishFn(const ir::Node&) {}
  template <typename T>
  T operator()(T x) const { return x * std::tanh(x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x))); }
};
using MishOp = UnaryOp<MishFn, kF>;
OT_REGISTER_OP("Mish", MishOp);

// Identity and the other ops that pass data through unchanged.
class IdentityOp : public Op {
 public:
  explicit IdentityOp(const ir::Node&) {}
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0), ctx.value_opt(0)); }
  void compute(ComputeCtx& c) const override {
    if (c.out(0).raw() != c.in(0).raw()) std::memcpy(c.out(0).raw(), c.in(0).raw(), c.in(0).nbytes());
  }
  int inplace_input() const override { return 0; }
};
OT_REGISTER_OP("Identity", IdentityOp);

// IsNaN and IsInf: float in, bool out.
class IsNaNOp : public Op {
 public:
  explicit IsNaNOp(const ir::Node& n)
      : inf_(n.op_type == "IsInf"), pos_(n.attr_int("detect_positive", 1)), neg_(n.attr_int("detect_negative", 1)) {}
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
