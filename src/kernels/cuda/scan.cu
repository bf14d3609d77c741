// CumSum on the GPU: a thread per line along the summed dim, walking it in order (as the CPU's kernel: the same
// order of additions); float types summed in float32.
#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename X>
__device__ __forceinline__ auto widened(X v) {
  if constexpr (std::is_same_v<X, bool>)
    return int64_t(v);
  else if constexpr (std::is_integral_v<X>)
    return v;
  else
    return to_float(v);
}

template <typename Y, typename A>
__device__ __forceinline__ Y narrowed(A v) {
  if constexpr (std::is_integral_v<A>)
    return Y(v);
  else
    return from_float<Y>(v);
}

template <typename X, typename Y>
__global__ void cum_sum_kernel(const X* x, Y* y, int64_t outer, int64_t n, int64_t inner, bool exclusive,
                               bool reverse) {
  ONNXTRAIN_GRID_LOOP(line, outer * inner) {
    const int64_t o = line / inner, i = line % inner;
    decltype(widened(X())) acc = 0;
    for (int64_t k0 = 0; k0 < n; ++k0) {
      const int64_t k = reverse ? n - 1 - k0 : k0, at = (o * n + k) * inner + i;
      const auto v = widened(x[at]);
      if (exclusive) {
        y[at] = narrowed<Y>(acc);
        acc += v;
      } else {
        acc += v;
        y[at] = narrowed<Y>(acc);
      }
    }
  }
}

template <typename X, typename Y>
void launch(const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse,
            cudaStream_t stream) {
  cum_sum_kernel<<<blocks_for(outer * inner), kThreads, 0, stream>>>(static_cast<const X*>(x), static_cast<Y*>(y),
                                                                     outer, n, inner, exclusive, reverse);
}

}  // namespace

void cum_sum(DType xt, DType yt, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool exclusive,
             bool reverse, cudaStream_t stream) {
  if (outer * n * inner == 0) return;
  if (xt == DType::kBool && yt == DType::kInt64)
    launch<bool, int64_t>(x, y, outer, n, inner, exclusive, reverse, stream);
  else if (xt == DType::kInt64 && yt == xt)
    launch<int64_t, int64_t>(x, y, outer, n, inner, exclusive, reverse, stream);
  else if (xt == DType::kInt32 && yt == xt)
    launch<int32_t, int32_t>(x, y, outer, n, inner, exclusive, reverse, stream);
  else if (yt != xt || !with_float_type(xt, [&](auto v) {
             using T = decltype(v);
             launch<T, T>(x, y, outer, n, inner, exclusive, reverse, stream);
           }))
    unsupported_dtype("CumSum", xt);
  check_launch("CumSum");
}

}  // namespace onnxtrain::kernels::cuda
