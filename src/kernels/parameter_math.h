// onnxtrain.optim's updates element by element, for both devices' kernels (kernels/<device>/parameter_update.cpp):
// PyTorch's AdamW and SGD hyper-parameters, the scalars each update works out once on the host, and one element's
// update in the compute type A (float for float32, bfloat16 and float16; double for float64), with PyTorch's
// numerics. Loads and stores of the element type stay with the caller.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace onnxtrain::kernels {

struct AdamWHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  bool amsgrad = false, maximize = false;
};

struct SgdHyper {
  double lr = 1e-3, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false, maximize = false;
};

// a b + c rounded once, and the square root rounded to nearest, in float or double: the same numbers on both
// devices (float division rounds to nearest on both too).
template <typename A>
ONNXTRAIN_HOST_DEVICE A fused(A a, A b, A c) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(A) == 4) return __fmaf_rn(a, b, c);
  else return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// a b rounded, then + c rounded: never one fused operation (nvcc fuses a * b + c unless told not to; the host's
// parameter_update.cpp compiles with -ffp-contract=off).
template <typename A>
ONNXTRAIN_HOST_DEVICE A product_then_sum(A a, A b, A c) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(A) == 4) return __fadd_rn(__fmul_rn(a, b), c);
  else return __dadd_rn(__dmul_rn(a, b), c);
#else
  return a * b + c;
#endif
}
template <typename A>
ONNXTRAIN_HOST_DEVICE A root(A x) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(A) == 4) return __fsqrt_rn(x);
  else return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// PyTorch's scalars, as its kernels take them: Python floats cast to the compute type. lerp(m, g, 1 - beta1) is in
// the form PyTorch's vectorized lerp picks for its weight: fma(c, g - m, base), base m when the weight is below 1/2
// (`low_weight`), else g.
template <typename A>
struct AdamWScalars {
  A decay, b2, w2, step_size, bc2_sqrt, eps, c, sign;
  bool low_weight;
};
template <typename A>
AdamWScalars<A> adamw_scalars(const AdamWHyper& h, int64_t step) {
  const A w1 = A(1 - h.beta1);
  AdamWScalars<A> s;
  s.decay = A(1 - h.lr * h.weight_decay), s.b2 = A(h.beta2), s.w2 = A(1 - h.beta2);
  s.step_size = A(h.lr / (1 - std::pow(h.beta1, double(step))));
  s.bc2_sqrt = A(std::pow(1 - std::pow(h.beta2, double(step)), 0.5));  // (Python's ** 0.5)
  s.eps = A(h.eps);
  s.low_weight = w1 < A(0.5);
  s.c = s.low_weight ? w1 : w1 - A(1);
  s.sign = h.maximize ? A(-1) : A(1);
  return s;
}

// One element's AdamW update from its gradient g: x, m, v and, with kAmsgrad, vmax (the largest v so far).
template <bool kAmsgrad, bool kLowWeight, typename A>
ONNXTRAIN_HOST_DEVICE void adamw_element(const AdamWScalars<A>& s, A g, A& x, A& m, A& v, A& vmax) {
  const A gi = s.sign * g, m0 = m;
  m = fused(s.c, gi - m0, kLowWeight ? m0 : gi);
  v = fused(s.w2 * gi, gi, v * s.b2);  // v beta2 + (1 - beta2) g g, as addcmul fuses it
  A top = v;
  if constexpr (kAmsgrad) {
    top = vmax < v ? v : vmax;
    vmax = top;
  }
  const A denom = root(top) / s.bc2_sqrt + s.eps;
  x = product_then_sum(x, s.decay, (-s.step_size * m) / denom);  // x (1 - lr wd), then addcdiv
}

template <typename A>
struct SgdScalars {
  A lr, wd, mu, keep, sign;
  bool nesterov;
};
template <typename A>
SgdScalars<A> sgd_scalars(const SgdHyper& h) {
  return {A(h.lr), A(h.weight_decay), A(h.momentum), A(1 - h.dampening), h.maximize ? A(-1) : A(1), h.nesterov};
}

// One element's SGD update from its gradient g, each add with alpha a fused multiply-add as PyTorch's: x and, with
// kMomentum, the momentum buffer b, which a first step sets to the gradient (as PyTorch's clones it).
template <bool kMomentum, typename A>
ONNXTRAIN_HOST_DEVICE void sgd_element(const SgdScalars<A>& s, bool first, A g, A& x, A& b) {
  A d = fused(x, s.wd, s.sign * g);
  if constexpr (kMomentum) {
    b = first ? d : fused(d, s.keep, b * s.mu);
    d = s.nesterov ? fused(b, s.mu, d) : b;
  }
  x = fused(d, -s.lr, x);
}

}  // namespace onnxtrain::kernels
