// The fused attention's warp-per-row kernels, forward and backward, as the CPU's kernel computes it
// (kernels/cpu/flash_attention.cpp): a warp per query row runs an online softmax over the keys, so no (tq, tk) buffer
// exists; the backward recomputes each probability from the row's log-sum-exp, a warp per query row for dQ (and each
// row's D = rowsum(dY Y)) and a warp per key for dK and dV (heads sharing K and V, grouped-query attention, summed in
// that warp: no atomics). Dropout draws the CPU's counter-based mask. Each lane holds head elements lane, lane + 32,
// ...: the kernels of heads too large for the tiled ones (attention_mma.cuh, attention_f32.cuh), of every dtype under
// ONNXTRAIN_CUDA_ATTENTION=simple. kRowWarps query rows (or keys) a block of kThreads. In namespace
// ONNXTRAIN_MMA_ATTENTION (attention_tiles.cuh), as the tiled kernels, so that the warp emulation runs a copy of them.
#pragma once
#include "kernels/cuda/attention_tiles.cuh"

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

constexpr int kRowWarps = kThreads / 32, kLaneElements = kMaxHead / 32;

// Elements lane, lane + 32, ... of a row of n (0 past its end).
template <typename T>
__device__ __forceinline__ void lane_load(const T* row, int64_t n, int lane, float (&out)[kLaneElements]) {
#pragma unroll
  for (int i = 0; i < kLaneElements; ++i) {
    const int64_t e = lane + 32 * i;
    out[i] = e < n ? to_float(row[e]) : 0.f;
  }
}

template <typename T>
__device__ __forceinline__ void lane_store(T* row, int64_t n, int lane, const float (&in)[kLaneElements]) {
#pragma unroll
  for (int i = 0; i < kLaneElements; ++i) {
    const int64_t e = lane + 32 * i;
    if (e < n) row[e] = from_float<T>(in[i]);
  }
}

// The dot product of a lane-held row with elements lane + 32 i of `row`, in every lane.
template <typename T>
__device__ __forceinline__ float lane_row_dot(const float (&a)[kLaneElements], const T* row, int64_t n, int lane) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < kLaneElements; ++i) {
    const int64_t e = lane + 32 * i;
    if (e < n) s += a[i] * to_float(row[e]);
  }
  return warp_sum(s);
}

// The dot product of two lane-held rows, in every lane.
__device__ __forceinline__ float lane_dot(const float (&a)[kLaneElements], const float (&b)[kLaneElements]) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < kLaneElements; ++i) s += a[i] * b[i];
  return warp_sum(s);
}

// Score (r, j) of a pair whose K starts at ki, not masked: scale q.k + bias.
template <typename T>
__device__ __forceinline__ float row_score(const Attention& a, const AttentionPair<T>& p,
                                           const float (&q)[kLaneElements], const T* ki, int64_t r, int64_t j,
                                           float scale, int lane) {
  return lane_row_dot(q, ki + j * a.k.row, a.d, lane) * scale + bias_at(a, p.bias, r, j);
}

template <typename T>
__global__ void rows_forward(Attention a, const T* q, const T* k, const T* v, T* y, float* lse) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  if (row >= a.pairs * a.tq) return;
  const int64_t pair = row / a.tq, r = row % a.tq;
  const AttentionPair<T> p = pair_of<T>(a, pair);
  const float scale = scalar_or<T>(a.scale, 1.f), fill = scalar_or<T>(a.fill, 0.f);
  const T *ki = k + a.k.at(p.kv), *vi = v + a.v.at(p.kv);  // (the pair's K and V rows' start, out of the loop)
  float qv[kLaneElements], acc[kLaneElements] = {}, vj[kLaneElements];
  lane_load(q + a.q.at(pair, r), a.d, lane, qv);
  float m = -INFINITY, l = 0;
  for (int64_t j = 0; j < a.tk; ++j) {
    const float s = masked(a, p.cond, r, j) ? fill : row_score(a, p, qv, ki, r, j, scale, lane);
    const float mn = fmaxf(m, s);
    if (mn == -INFINITY) continue;  // every score so far -inf: nothing to add yet
    const float alpha = __expf(m - mn), e = __expf(s - mn);
    l = l * alpha + e;
    m = mn;
    const float pd = a.dropout && !keeps(a, row, j) ? 0.f : a.dropout ? e * a.keep_scale : e;
    lane_load(vi + j * a.v.row, a.dv, lane, vj);
#pragma unroll
    for (int i = 0; i < kLaneElements; ++i) acc[i] = acc[i] * alpha + pd * vj[i];
  }
  const bool empty = l == 0;  // a fully masked row: NaN as Softmax gives, or zeros
  const float inv = empty ? (a.zero_masked_rows ? 0.f : NAN) : 1.f / l;
#pragma unroll
  for (int i = 0; i < kLaneElements; ++i) acc[i] *= inv;
  lane_store(y + a.y.at(pair, r), a.dv, lane, acc);
  if (lse && lane == 0) lse[row] = empty ? (a.zero_masked_rows ? INFINITY : NAN) : m + logf(l);
}

// dQ, and each row's D = rowsum(dY Y) for the key kernel.
template <typename T>
__global__ void rows_dq(Attention a, const T* dy, const T* q, const T* k, const T* v, const T* y, const float* lse,
                        float* row_dots, T* dq) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  if (row >= a.pairs * a.tq) return;
  const int64_t pair = row / a.tq, r = row % a.tq;
  const AttentionPair<T> p = pair_of<T>(a, pair);
  const float scale = scalar_or<T>(a.scale, 1.f);
  const T *ki = k + a.k.at(p.kv), *vi = v + a.v.at(p.kv);
  float qv[kLaneElements], dyv[kLaneElements], acc[kLaneElements] = {};
  lane_load(q + a.q.at(pair, r), a.d, lane, qv);
  lane_load(dy + a.y.at(pair, r), a.dv, lane, dyv);
  const float dr = lane_row_dot(dyv, y + a.y.at(pair, r), a.dv, lane), lr = lse[row];
  if (lane == 0) row_dots[row] = dr;
  for (int64_t j = 0; j < a.tk; ++j) {
    if (masked(a, p.cond, r, j)) continue;  // (the fill is a constant: no gradient through it)
    const float e = __expf(row_score(a, p, qv, ki, r, j, scale, lane) - lr);
    float dp = lane_row_dot(dyv, vi + j * a.v.row, a.dv, lane);
    if (a.dropout) dp = keeps(a, row, j) ? dp * a.keep_scale : 0.f;
    const float ds = e * (dp - dr) * scale;
    const T* kj = ki + j * a.k.row;
#pragma unroll
    for (int i = 0; i < kLaneElements; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < a.d) acc[i] += ds * to_float(kj[c]);
    }
  }
  lane_store(dq + a.q.at(pair, r), a.d, lane, acc);
}

// dK and dV of key j of K and V batch index kv: the sums over every query row of every pair reading them.
template <typename T>
__global__ void rows_dkv(Attention a, const T* dy, const T* q, const T* k, const T* v, const float* lse,
                         const float* row_dots, T* dk_out, T* dvo) {
  const int lane = threadIdx.x % 32;
  const int64_t w = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  if (w >= a.kv_count * a.tk) return;
  const int64_t kv = w / a.tk, j = w % a.tk;
  const float scale = scalar_or<T>(a.scale, 1.f), fill = scalar_or<T>(a.fill, 0.f);
  float kj[kLaneElements], vj[kLaneElements], dk[kLaneElements] = {}, dvv[kLaneElements] = {}, x[kLaneElements];
  lane_load(k + a.k.at(kv, j), a.d, lane, kj);
  lane_load(v + a.v.at(kv, j), a.dv, lane, vj);
  for (KvPairs pairs{kv}; pairs.next(a) < a.pairs;) {
    const int64_t pair = pairs.pair;
    const AttentionPair<T> p = pair_of<T>(a, pair);
    const T *qi = q + a.q.at(pair), *dyi = dy + a.y.at(pair);  // (the pair's rows' starts, out of the loop)
    for (int64_t r = 0; r < a.tq; ++r) {
      const int64_t row = pair * a.tq + r;
      const bool off = masked(a, p.cond, r, j);
      float s = fill;
      if (!off) {
        lane_load(qi + r * a.q.row, a.d, lane, x);
        s = lane_dot(x, kj) * scale + bias_at(a, p.bias, r, j);
      }
      const float e = __expf(s - lse[row]);
      if (e == 0.f) continue;
      const bool keep = !a.dropout || keeps(a, row, j);
      const float pd = !keep ? 0.f : a.dropout ? e * a.keep_scale : e;
      float g[kLaneElements];
      lane_load(dyi + r * a.y.row, a.dv, lane, g);
#pragma unroll
      for (int i = 0; i < kLaneElements; ++i) dvv[i] += pd * g[i];
      if (off) continue;
      float dp = lane_dot(g, vj);
      if (a.dropout) dp = keep ? dp * a.keep_scale : 0.f;
      const float ds = e * (dp - row_dots[row]) * scale;
#pragma unroll
      for (int i = 0; i < kLaneElements; ++i) dk[i] += ds * x[i];
    }
  }
  lane_store(dk_out + a.k.at(kv, j), a.d, lane, dk);
  lane_store(dvo + a.v.at(kv, j), a.dv, lane, dvv);
}

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
