// onnxtrain.optim's updates on the GPU: a thread per element over a grid-stride loop, each element's update
// kernels/parameter_math.h's (the CPU's, with the same roundings), in float for float32, bfloat16 and float16 and in
// double for float64.
#include "kernels/cuda/device_types.cuh"
#include "kernels/parameter_math.h"

namespace onnxtrain::kernels::cuda {
namespace {

// The compute type of T: float for float32 and the 16-bit types, double for float64.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <typename T>
__device__ __forceinline__ Acc<T> load(T x) {
  if constexpr (std::is_same_v<T, double>)
    return x;
  else
    return to_float(x);
}
template <typename T>
__device__ __forceinline__ T store(Acc<T> x) {
  if constexpr (std::is_same_v<T, double>)
    return x;
  else
    return from_float<T>(x);
}

template <typename T, bool kAmsgrad, bool kLowWeight>
__global__ void adamw_kernel(AdamWScalars<Acc<T>> s, T* x, const T* g, T* m, T* v, T* vmax, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    Acc<T> xi = load(x[i]), mi = load(m[i]), vi = load(v[i]), top = kAmsgrad ? load(vmax[i]) : Acc<T>(0);
    adamw_element<kAmsgrad, kLowWeight>(s, load(g[i]), xi, mi, vi, top);
    m[i] = store<T>(mi);
    v[i] = store<T>(vi);
    if constexpr (kAmsgrad) vmax[i] = store<T>(top);
    x[i] = store<T>(xi);
  }
}

template <typename T, bool kMomentum>
__global__ void sgd_kernel(SgdScalars<Acc<T>> s, bool first, T* x, const T* g, T* buf, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    Acc<T> xi = load(x[i]), b = kMomentum ? load(buf[i]) : Acc<T>(0);
    sgd_element<kMomentum>(s, first, load(g[i]), xi, b);
    if constexpr (kMomentum) buf[i] = store<T>(b);
    x[i] = store<T>(xi);
  }
}

template <typename T>
__global__ void accumulate_kernel(T* acc, const T* g, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) acc[i] = store<T>(load(acc[i]) + load(g[i]));
}

// Calls f with a value of the device element type of a float dtype (float64 too).
template <typename F>
void with_update_type(DType t, const char* kernel, F&& f) {
  if (t == DType::kFloat64) return f(double{});
  if (!with_float_type(t, f)) unsupported_dtype(kernel, t);
}

}  // namespace

void adamw(DType t, void* x, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamWHyper& h,
           int64_t step, cudaStream_t stream) {
  if (n == 0) return;
  with_update_type(t, "AdamW", [&](auto e) {
    using T = decltype(e);
    const auto s = adamw_scalars<Acc<T>>(h, step);
    auto go = [&](auto amsgrad, auto low) {
      adamw_kernel<T, decltype(amsgrad)::value, decltype(low)::value><<<blocks_for(n), kThreads, 0, stream>>>(
          s, static_cast<T*>(x), static_cast<const T*>(g), static_cast<T*>(m), static_cast<T*>(v),
          static_cast<T*>(vmax), n);
    };
    if (vmax)
      s.low_weight ? go(std::true_type{}, std::true_type{}) : go(std::true_type{}, std::false_type{});
    else
      s.low_weight ? go(std::false_type{}, std::true_type{}) : go(std::false_type{}, std::false_type{});
  });
  check_launch("AdamW");
}

void sgd(DType t, void* x, const void* g, void* buf, bool first, int64_t n, const SgdHyper& h, cudaStream_t stream) {
  if (n == 0) return;
  with_update_type(t, "SGD", [&](auto e) {
    using T = decltype(e);
    const auto s = sgd_scalars<Acc<T>>(h);
    auto* xp = static_cast<T*>(x);
    auto* gp = static_cast<const T*>(g);
    if (buf)
      sgd_kernel<T, true><<<blocks_for(n), kThreads, 0, stream>>>(s, first, xp, gp, static_cast<T*>(buf), n);
    else
      sgd_kernel<T, false><<<blocks_for(n), kThreads, 0, stream>>>(s, first, xp, gp, nullptr, n);
  });
  check_launch("SGD");
}

void accumulate(DType t, void* acc, const void* g, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_update_type(t, "gradient accumulation", [&](auto e) {
    using T = decltype(e);
    accumulate_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(acc), static_cast<const T*>(g), n);
  });
  check_launch("gradient accumulation");
}

}  // namespace onnxtrain::kernels::cuda
