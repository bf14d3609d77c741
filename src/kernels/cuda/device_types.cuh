// What the .cu files share: element types by DType, float conversion of every element type, the index walk of
// launch.h's Indexing, and the launch shape of a flat loop.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return T(x);
}

// The offsets of flat index i (< numel(ix)) of ix's shape in its first N arrays. The outermost coordinate is what
// is left of i; each division is 32-bit where both operands fit (64-bit division is many times slower on a GPU).
template <int N>
struct Offsets {
  int64_t at[N];
};
template <int N>
__device__ __forceinline__ Offsets<N> offsets(const Indexing& ix, int64_t i) {
  Offsets<N> o{};
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t c = i;
    if (d > 0) {
      const int64_t n = ix.dims[d];
      if (((uint64_t(i) | uint64_t(n)) >> 32) == 0) {
        c = int64_t(uint32_t(i) % uint32_t(n));
        i = int64_t(uint32_t(i) / uint32_t(n));
      } else {
        c = i % n;
        i /= n;
      }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) o.at[k] += c * ix.strides[k][d];
  }
  return o;
}

inline int64_t numel(const Indexing& ix) {
  int64_t n = 1;
  for (int d = 0; d < ix.rank; ++d) n *= ix.dims[d];
  return n;
}

// A grid-stride loop's launch: 256 threads a block, at most 65535 * 8 blocks.
constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}
#define ONNXTRAIN_GRID_LOOP(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// A launch over rows of `cols` elements: blocks of kThreads along a row's columns (at most 1024 of them) by a block
// row a row (at most 65535: the kernel loops over rows by gridDim.y, and over a row's columns by the blocks along x).
inline dim3 rows_grid(int64_t rows, int64_t cols) {
  const int64_t across = (cols + kThreads - 1) / kThreads;
  return dim3(unsigned(across < 1024 ? across : 1024), unsigned(rows < 65535 ? rows : 65535));
}

// A block per row: at most 2^31 - 1 of them (else launch_error naming the kernel).
inline void check_rows(int64_t rows, const char* kernel) {
  if (rows > 0x7fffffff) launch_error(std::string(kernel) + ": more than 2^31 rows");
}

// Calls f with a value of the device element type of a float dtype; false for another dtype.
template <typename F>
bool with_float_type(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat16:
      f(__half{});
      return true;
    case DType::kBFloat16:
      f(__nv_bfloat16{});
      return true;
    default:
      return false;
  }
}

// Calls f(T{}, U{}) for float dtypes t and u, u t's own or a 16-bit float beside a float32 t (autocast's: a norm's
// 16-bit output or gradient, a head's scores); false for other pairs.
template <typename F>
bool with_float_pair(DType t, DType u, F&& f) {
  if (u == t) return with_float_type(t, [&](auto v) { f(v, v); });
  if (t != DType::kFloat32 || (u != DType::kBFloat16 && u != DType::kFloat16)) return false;
  return with_float_type(u, [&](auto v) { f(float{}, v); });
}

// Calls f with an unsigned type of `bytes` bytes.
template <typename F>
void with_bytes(int bytes, const char* kernel, F&& f) {
  switch (bytes) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: launch_error(std::string(kernel) + ": elements of " + std::to_string(bytes) + " bytes");
  }
}

}  // namespace onnxtrain::kernels::cuda
