// The random ops on the GPU: element i draws from counter_bits(seed, i) exactly as the CPU's kernel does
// (kernels/cpu/random.cpp), so a recomputed clone, or the same seed on either device, draws the same numbers.
#include "kernels/counter_random.h"
#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {
namespace {

__device__ __forceinline__ float draw(int kind, uint64_t bits, float a, float b, float p) {
  if (kind == 0) return a + (b - a) * unit_uniform(bits);
  if (kind == 1) {
    const float radius = sqrtf(-2.f * logf(unit_uniform_open(bits)));
    return a + b * radius * cosf(6.2831853071795865f * unit_uniform(bits));
  }
  return unit_uniform(bits) < p ? 1.f : 0.f;
}

template <typename T, typename P>
__global__ void random_kernel(int kind, T* y, int64_t n, uint64_t seed, float a, float b, const P* p) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    y[i] = from_float<T>(draw(kind, counter_bits(seed, uint64_t(i)), a, b, p ? to_float(p[i]) : 0.f));
  }
}

}  // namespace

void random_fill(int kind, DType t, void* y, int64_t n, uint64_t seed, float a, float b, DType pt, const void* p,
                 cudaStream_t stream) {
  if (n == 0) return;
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    if (!p) {
      random_kernel<T, float><<<blocks_for(n), kThreads, 0, stream>>>(kind, static_cast<T*>(y), n, seed, a, b,
                                                                      nullptr);
      return;
    }
    bool p_ok = with_float_type(pt, [&](auto q) {
      using P = decltype(q);
      random_kernel<T, P><<<blocks_for(n), kThreads, 0, stream>>>(kind, static_cast<T*>(y), n, seed, a, b,
                                                                  static_cast<const P*>(p));
    });
    if (!p_ok) unsupported_dtype("Bernoulli's probabilities", pt);
  });
  if (!ok) unsupported_dtype("a random op's output", t);
  check_launch("random");
}

}  // namespace onnxtrain::kernels::cuda
