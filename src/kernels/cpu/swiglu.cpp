// com.onnxtrain.SwiGLU and SwiGLUGrad: float32 a block at a time with the vector exp (sigmoid(g) = 1 / (1 + e^-g));
// bfloat16 and float16 computed in float32 blocks and rounded once; float64 in scalar code.
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

constexpr int64_t kBlock = 256;

// s = sigmoid(g) for n <= kBlock floats.
void sigmoid_block(const float* g, float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) s[i] = -g[i];
  exp_f32(s, s, n);
  for (int64_t i = 0; i < n; ++i) s[i] = 1.0f / (1.0f + s[i]);
}

void swiglu_f32(const float* g, const float* u, float* y, int64_t n) {
  alignas(32) float s[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t m = std::min(kBlock, n - b);
    sigmoid_block(g + b, s, m);
    for (int64_t i = 0; i < m; ++i) y[b + i] = g[b + i] * s[i] * u[b + i];
  }
}

void swiglu_grad_f32(const float* dy, const float* g, const float* u, float* dg, float* du, int64_t n) {
  alignas(32) float s[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t m = std::min(kBlock, n - b);
    sigmoid_block(g + b, s, m);
    for (int64_t i = 0; i < m; ++i) {
      const float gi = g[b + i], si = s[i], di = dy[b + i];
      if (du) du[b + i] = di * gi * si;
      if (dg) dg[b + i] = di * u[b + i] * si * (1.0f + gi * (1.0f - si));
    }
  }
}

template <typename T>
T sigmoid(T x) {
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}

void swiglu(KernelCtx& c) {
  c.inputs_like_first(2);
  dispatch<kFloats>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *g = c.in(0).data<T>(), *u = c.in(1).data<T>();
    T* y = c.out(0).data<T>();
    parallel_for(c.in(0).numel(), 16, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        swiglu_f32(g + b, u + b, y + b, e - b);
      } else if constexpr (kLowFloat<T>) {
        in_f32_blocks<T, 2, 1>({g, u}, {y}, b, e,
                               [](auto in, auto o, int64_t m) { swiglu_f32(in[0], in[1], o[0], m); });
      } else {
        for (int64_t i = b; i < e; ++i) y[i] = g[i] * sigmoid(g[i]) * u[i];
      }
    });
  });
}

void swiglu_grad(KernelCtx& c) {
  c.inputs_like_first(3);
  dispatch<kFloats>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *d = c.in(0).data<T>(), *g = c.in(1).data<T>(), *u = c.in(2).data<T>();
    T* dg = c.wants(0) ? c.out(0).data<T>() : nullptr;
    T* du = c.wants(1) ? c.out(1).data<T>() : nullptr;
    parallel_for(c.in(0).numel(), 24, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        swiglu_grad_f32(d + b, g + b, u + b, dg ? dg + b : nullptr, du ? du + b : nullptr, e - b);
      } else if constexpr (kLowFloat<T>) {
        // (an output not wanted is computed into a block nobody reads)
        std::vector<T> unused(dg && du ? 0 : size_t(e - b));
        T* dgb = dg ? dg + b : unused.data();
        T* dub = du ? du + b : unused.data();
        in_f32_blocks<T, 3, 2>({d + b, g + b, u + b}, {dgb, dub}, 0, e - b, [](auto in, auto o, int64_t m) {
          swiglu_grad_f32(in[0], in[1], in[2], o[0], o[1], m);
        });
      } else {
        for (int64_t i = b; i < e; ++i) {
          const T s = sigmoid(g[i]);
          if (du) du[i] = d[i] * g[i] * s;
          if (dg) dg[i] = d[i] * u[i] * s * (T(1) + g[i] * (T(1) - s));
        }
      }
    });
  });
}

const bool kRegistered = register_kernels(kCpu, {{"com.onnxtrain", "SwiGLU", kernel(swiglu)},
                                                 {"com.onnxtrain", "SwiGLUGrad", kernel(swiglu_grad)}});

}  // namespace
}  // namespace onnxtrain::kernels
