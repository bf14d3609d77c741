// What both FlashAttention kernels (attention.cu's warp-per-row kernels, attention_mma.cuh's tensor-core ones) read
// of launch.h's Attention: a query pair's K and V, mask and bias rows; the scalars on the device; the mask and the
// dropout draw of score (r, j), and a score row's block keys of the draw; a warp's sum.
#pragma once
#include "kernels/counter_random.h"
#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// What one query pair reads: its K and V batch index, mask and bias rows' starts, and their slice (launch.h).
template <typename T>
struct AttentionPair {
  int64_t kv;
  const bool* cond;
  const T* bias;
  int64_t slice;
};
// Slice `slice`'s mask and bias, for K and V batch index kv.
template <typename T>
__device__ __forceinline__ AttentionPair<T> slice_of(const Attention& a, int64_t slice, int64_t kv) {
  const Offsets<2> o = offsets<2>(a.slices, slice);
  return {kv, a.cond ? a.cond + o.at[0] : nullptr, a.bias ? static_cast<const T*>(a.bias) + o.at[1] : nullptr, slice};
}
// A pair's slice and K and V batch index.
__device__ __forceinline__ Offsets<2> slice_and_kv(const Attention& a, int64_t pair) {
  Offsets<2> o = offsets<2>(a.batch, pair);
  const int64_t rep = o.at[1], span = a.kv_heads * a.groups;
  if (a.groups != 1) o.at[1] = rep / span * a.kv_heads + rep % span / a.groups;
  return o;
}
template <typename T>
__device__ __forceinline__ AttentionPair<T> pair_of(const Attention& a, int64_t pair) {
  const Offsets<2> o = slice_and_kv(a, pair);
  return slice_of<T>(a, o.at[0], o.at[1]);
}

// The pairs that read K and V batch index kv, in increasing order, one at a time: where the launch found them evenly
// spaced (Attention::kv_pairs), the n-th from its place; else the next pair found reading kv, trying each in turn.
struct KvPairs {
  int64_t kv, pair = -1, n = -1;
  // The next pair (a.pairs: none left).
  __device__ __forceinline__ int64_t next(const Attention& a) {
    if (a.kv_pairs > 0) return pair = ++n < a.kv_pairs ? kv * a.kv_pair_mult + n * a.kv_pair_step : a.pairs;
    do ++pair;
    while (pair < a.pairs && slice_and_kv(a, pair).at[1] != kv);
    return pair;
  }
};

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

// Where a score row is whole blocks of dropout's draw (counter_random.h; tk a multiple of 64), the key of the block
// holding keys j0 .. j0 + 63 (j0 a multiple of 64) of query row `row`: score (row, j) then keeps by
// dropout_keeps_at(key, j - j0), a few 32-bit operations.
__device__ __forceinline__ bool blocked_rows(const Attention& a) { return a.tk % int64_t(kDropoutBlock) == 0; }
__device__ __forceinline__ uint32_t row_key(const Attention& a, int64_t row, int64_t j0) {
  return dropout_key(a.seed, (uint64_t(row) * uint64_t(a.tk) + uint64_t(j0)) / kDropoutBlock);
}

}  // namespace onnxtrain::kernels::cuda
