// What both FlashAttention kernels (attention.cu's warp-per-row kernels, attention_mma.cuh's tensor-core ones) read
// of launch.h's Attention: a query pair's K and V, mask and bias rows; the scalars on the device; the mask and the
// dropout draw of score (r, j); a warp's sum.
#pragma once
#include "kernels/counter_random.h"
#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// What one query pair reads: its K and V batch index, mask and bias rows' starts.
template <typename T>
struct AttentionPair {
  int64_t kv;
  const bool* cond;
  const T* bias;
};
template <typename T>
__device__ __forceinline__ AttentionPair<T> pair_of(const Attention& a, int64_t pair) {
  const Offsets<3> o = offsets<3>(a.batch, pair);
  const int64_t rep = o.at[2], span = a.kv_heads * a.groups;
  return {a.groups == 1 ? rep : rep / span * a.kv_heads + rep % span / a.groups, a.cond ? a.cond + o.at[0] : nullptr,
          a.bias ? static_cast<const T*>(a.bias) + o.at[1] : nullptr};
}

template <typename T>
__device__ __forceinline__ float scalar_or(const void* p, float otherwise) {
  return p ? to_float(*static_cast<const T*>(p)) : otherwise;
}

__device__ __forceinline__ bool masked(const Attention& a, const bool* cond, int64_t r, int64_t j) {
  return cond && cond[r * a.cond_row + j * a.cond_col];
}

template <typename T>
__device__ __forceinline__ float bias_at(const Attention& a, const T* bias, int64_t r, int64_t j) {
  return bias ? to_float(bias[r * a.bias_row + j * a.bias_col]) : 0.f;
}

// Whether dropout keeps score (r, j) of query row `row` (pair * tq + r): the CPU kernel's draw.
__device__ __forceinline__ bool keeps(const Attention& a, int64_t row, int64_t j) {
  return dropout_keeps(a.seed, uint64_t(row) * uint64_t(a.tk) + uint64_t(j), a.threshold);
}

}  // namespace onnxtrain::kernels::cuda
