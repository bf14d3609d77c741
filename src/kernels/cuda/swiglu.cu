// com.onnxtrain.SwiGLU and SwiGLUGrad on the GPU: one grid-stride pass over the elements, in float32.
#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {
namespace {

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T>
__global__ void swiglu_kernel(const T* g, const T* u, T* y, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    const float gi = to_float(g[i]);
    y[i] = from_float<T>(gi * sigmoid(gi) * to_float(u[i]));
  }
}

template <typename T>
__global__ void swiglu_grad_kernel(const T* dy, const T* g, const T* u, T* dg, T* du, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    const float gi = to_float(g[i]), s = sigmoid(gi), d = to_float(dy[i]);
    if (du) du[i] = from_float<T>(d * gi * s);
    if (dg) dg[i] = from_float<T>(d * to_float(u[i]) * s * (1.0f + gi * (1.0f - s)));
  }
}

}  // namespace

void swiglu(DType t, const void* g, const void* u, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    swiglu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(g), static_cast<const T*>(u),
                                                          static_cast<T*>(y), n);
  });
  if (!ok) unsupported_dtype("SwiGLU", t);
  check_launch("SwiGLU");
}

void swiglu_grad(DType t, const void* dy, const void* g, const void* u, void* dg, void* du, int64_t n,
                 cudaStream_t stream) {
  if (n == 0 || (!dg && !du)) return;
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    swiglu_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(dy), static_cast<const T*>(g),
                                                               static_cast<const T*>(u), static_cast<T*>(dg),
                                                               static_cast<T*>(du), n);
  });
  if (!ok) unsupported_dtype("SwiGLUGrad", t);
  check_launch("SwiGLUGrad");
}

}  // namespace onnxtrain::kernels::cuda
