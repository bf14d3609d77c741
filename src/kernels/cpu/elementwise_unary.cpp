// CPU kernels of the elementwise ops of one input: each op is one functor line (of the attributes and x); the
// loop and the dtype dispatch are written once, in `unary`. A float32 array kernel (vector_math.h) serves
// where one exists.
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/wrapping.h"
#include "kernels/kernel.h"
#include "ops/elementwise.h"

namespace onnxtrain::kernels {
namespace {

using ops::UnaryAttrs;

// A float32 array kernel; returns false where the attributes ask for the scalar loop (a call of 0 elements asks).
using VectorFn = bool (*)(const UnaryAttrs&, const float* x, float* y, int64_t n);

// y = f(attributes, x) elementwise, for the dtypes of `Types`; bfloat16 and float16 computed in float (through the
// float32 array kernel, in converted blocks, where one serves).
template <int Types, typename F>
KernelFn unary(F f, VectorFn vector = nullptr) {
  return kernel_with<UnaryAttrs>([f, vector](const UnaryAttrs& a, KernelCtx& c) {
    dispatch<Types>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = c.in(0).data<T>();
      T* y = c.out(0).data<T>();
      parallel_for(c.in(0).numel(), 8, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float>) {
          if (vector && vector(a, x + b, y + b, e - b)) return;
        } else if constexpr (kLowFloat<T>) {
          if (vector && vector(a, nullptr, nullptr, 0)) {
            in_f32_blocks<T, 1, 1>({x}, {y}, b, e, [&](auto in, auto out, int64_t m) { vector(a, in[0], out[0], m); });
            return;
          }
        }
        for (int64_t i = b; i < e; ++i) y[i] = T(f(a, acc_t<T>(x[i])));
      });
    });
  });
}

template <typename T>
T sigmoid(T x) {
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}
template <typename T>
T softplus(T x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
template <typename T>
T gelu(bool tanh_approx, T x) {
  if (tanh_approx) return T(0.5) * x * (T(1) + std::tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
  return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
}
template <typename T>
T hard_swish(T x) {
  return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
}
template <typename T>
T gelu_derivative(T x) {  // Phi(x) + x phi(x)
  T cdf = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
  T pdf = T(0.3989422804014327) * std::exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}
template <typename T>
T gelu_tanh_derivative(T x) {  // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
  const T k(0.7978845608028654), c(0.044715);
  const T t = std::tanh(k * (x + c * x * x * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x);
}

bool exp_vector(const UnaryAttrs&, const float* x, float* y, int64_t n) { return exp_f32(x, y, n), true; }
bool erf_vector(const UnaryAttrs&, const float* x, float* y, int64_t n) { return erf_f32(x, y, n), true; }
bool gelu_vector(const UnaryAttrs& a, const float* x, float* y, int64_t n) {
  (a.tanh_approx ? gelu_tanh_f32 : gelu_f32)(x, y, n);
  return true;
}

void check_same(const KernelCtx& c, const Tensor& x, const Tensor& dy) {
  if (dy.numel() != x.numel() || dy.dtype() != x.dtype())
    c.fail("dy " + dims_str(dy.dims()) + " and x " + dims_str(x.dims()) + " differ");
}

// com.onnxtrain.GeluGrad(dy, x) = dy GELU'(x): Phi(x) + x phi(x), or the tanh form's derivative.
void gelu_grad(const UnaryAttrs& a, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1);
  check_same(c, x, dy);
  const auto vector = a.tanh_approx ? gelu_tanh_grad_f32 : gelu_grad_f32;
  dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *d = dy.data<T>(), *xp = x.data<T>();
    T* out = c.out(0).data<T>();
    parallel_for(x.numel(), 30, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        vector(d + b, xp + b, out + b, e - b);
      } else if constexpr (kLowFloat<T>) {
        in_f32_blocks<T, 2, 1>({d, xp}, {out}, b, e,
                               [vector](auto in, auto o, int64_t m) { vector(in[0], in[1], o[0], m); });
      } else {
        for (int64_t i = b; i < e; ++i)
          out[i] = d[i] * (a.tanh_approx ? gelu_tanh_derivative(xp[i]) : gelu_derivative(xp[i]));
      }
    });
  });
}

// com.onnxtrain.GeluAndGrad(dy, x) = (GeluGrad(dy, x), Gelu(x)), bit for bit as the two apart.
void gelu_and_grad(const UnaryAttrs& a, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1);
  check_same(c, x, dy);
  dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *d = dy.data<T>(), *xp = x.data<T>();
    T *dx = c.out(0).data<T>(), *y = c.out(1).data<T>();
    const auto vector = a.tanh_approx ? gelu_tanh_and_grad_f32 : gelu_and_grad_f32;
    parallel_for(x.numel(), 40, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        vector(d + b, xp + b, dx + b, y + b, e - b);
      } else if constexpr (kLowFloat<T>) {
        in_f32_blocks<T, 2, 2>({d, xp}, {dx, y}, b, e,
                               [vector](auto in, auto o, int64_t m) { vector(in[0], in[1], o[0], o[1], m); });
      } else {
        for (int64_t i = b; i < e; ++i) {  // (dx may be dy's buffer and y x's: both read before either is written)
          const T xi = xp[i], di = d[i];
          y[i] = gelu(a.tanh_approx, xi);
          dx[i] = di * (a.tanh_approx ? gelu_tanh_derivative(xi) : gelu_derivative(xi));
        }
      }
    });
  });
}

void is_nan(KernelCtx& c) {
  dispatch<kFloats>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = c.in(0).data<T>();
    bool* y = c.out(0).data<bool>();
    for (int64_t i = 0; i < c.in(0).numel(); ++i) y[i] = std::isnan(x[i]);
  });
}

void is_inf(const ops::IsInfAttrs& a, KernelCtx& c) {
  dispatch<kFloats>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = c.in(0).data<T>();
    bool* y = c.out(0).data<bool>();
    for (int64_t i = 0; i < c.in(0).numel(); ++i)
      y[i] = std::isinf(x[i]) && ((x[i] > 0 && a.positive) || (x[i] < 0 && a.negative));
  });
}

const bool kRegistered = register_kernels(
    kCpu,
    {
        {"", "Abs",
         unary<kNumeric>([](auto, auto x) { return std::is_signed_v<decltype(x)> && x < 0 ? wrapping_neg(x) : x; })},
        {"", "Neg", unary<kNumeric>([](auto, auto x) { return wrapping_neg(x); })},
        {"", "Exp", unary<kFloats>([](auto, auto x) { return std::exp(x); }, exp_vector)},
        {"", "Log", unary<kFloats>([](auto, auto x) { return std::log(x); })},
        {"", "Sqrt", unary<kFloats>([](auto, auto x) { return std::sqrt(x); })},
        {"", "Reciprocal", unary<kFloats>([](auto, auto x) { return 1 / x; })},
        {"", "Tanh", unary<kFloats>([](auto, auto x) { return std::tanh(x); })},
        {"", "Sigmoid", unary<kFloats>([](auto, auto x) { return sigmoid(x); })},
        {"", "Relu", unary<kNumeric>([](auto, auto x) { return x > 0 ? x : decltype(x)(0); })},
        {"", "Softsign", unary<kFloats>([](auto, auto x) { return x / (1 + std::abs(x)); })},
        {"", "Softplus", unary<kFloats>([](auto, auto x) { return softplus(x); })},
        {"", "Erf", unary<kFloats>([](auto, auto x) { return std::erf(x); }, erf_vector)},
        {"", "Sin", unary<kFloats>([](auto, auto x) { return std::sin(x); })},
        {"", "Cos", unary<kFloats>([](auto, auto x) { return std::cos(x); })},
        {"", "Tan", unary<kFloats>([](auto, auto x) { return std::tan(x); })},
        {"", "Asin", unary<kFloats>([](auto, auto x) { return std::asin(x); })},
        {"", "Acos", unary<kFloats>([](auto, auto x) { return std::acos(x); })},
        {"", "Atan", unary<kFloats>([](auto, auto x) { return std::atan(x); })},
        {"", "Sinh", unary<kFloats>([](auto, auto x) { return std::sinh(x); })},
        {"", "Cosh", unary<kFloats>([](auto, auto x) { return std::cosh(x); })},
        {"", "Asinh", unary<kFloats>([](auto, auto x) { return std::asinh(x); })},
        {"", "Acosh", unary<kFloats>([](auto, auto x) { return std::acosh(x); })},
        {"", "Atanh", unary<kFloats>([](auto, auto x) { return std::atanh(x); })},
        {"", "Floor", unary<kFloats>([](auto, auto x) { return std::floor(x); })},
        {"", "Ceil", unary<kFloats>([](auto, auto x) { return std::ceil(x); })},
        {"", "Round", unary<kFloats>([](auto, auto x) { return std::nearbyint(x); })},  // half to even
        {"", "Sign", unary<kNumeric>([](auto, auto x) { return (x > 0) - (x < 0); })},
        {"", "Not", unary<kBool>([](auto, bool x) { return !x; })},
        {"", "HardSwish", unary<kFloats>([](auto, auto x) { return hard_swish(x); })},
        {"", "LeakyRelu", unary<kFloats>([](const UnaryAttrs& a, auto x) { return x >= 0 ? x : a.alpha * x; })},
        {"", "Elu", unary<kFloats>([](const UnaryAttrs& a, auto x) { return x >= 0 ? x : a.alpha * std::expm1(x); })},
        {"", "Celu", unary<kFloats>([](const UnaryAttrs& a, auto x) {
           using T = decltype(x);
           return std::max(T(0), x) + std::min(T(0), T(a.alpha) * std::expm1(x / T(a.alpha)));
         })},
        {"", "Selu",
         unary<kFloats>([](const UnaryAttrs& a, auto x) { return a.gamma * (x > 0 ? x : a.alpha * std::expm1(x)); })},
        {"", "HardSigmoid", unary<kFloats>([](const UnaryAttrs& a, auto x) {
           using T = decltype(x);
           return std::max(T(0), std::min(T(1), T(a.alpha) * x + T(a.beta)));
         })},
        {"", "ThresholdedRelu", unary<kFloats>([](const UnaryAttrs& a, auto x) { return x > a.alpha ? x : 0; })},
        {"", "Gelu", unary<kFloats>([](const UnaryAttrs& a, auto x) { return gelu(a.tanh_approx, x); }, gelu_vector)},
        {"", "Mish", unary<kFloats>([](auto, auto x) { return x * std::tanh(softplus(x)); })},
        {"com.onnxtrain", "GeluGrad", kernel<UnaryAttrs>(gelu_grad)},
        {"com.onnxtrain", "GeluAndGrad", kernel<UnaryAttrs>(gelu_and_grad)},
        {"", "IsNaN", kernel(is_nan)},
        {"", "IsInf", kernel(is_inf)},
    });

}  // namespace
}  // namespace onnxtrain::kernels
