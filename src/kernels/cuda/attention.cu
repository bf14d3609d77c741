// Fused attention on the GPU, forward and backward, as the CPU's kernel computes it (kernels/cpu/flash_attention.cpp):
// a warp per query row runs an online softmax over the keys, so no (tq, tk) buffer exists; the backward recomputes
// each probability from the row's log-sum-exp, a warp per query row for dQ and a warp per key for dK and dV (heads
// sharing K and V, grouped-query attention, summed in that warp: no atomics). Dropout draws the CPU's counter-based
// mask. Each lane holds head elements lane, lane + 32, ...: the kernels of heads too large for the tiled ones, which
// take 16-bit operands with heads of up to 128 elements (attention_mma.cuh's tensor-core kernels) and float32 ones
// with heads of up to 64 (attention_f32.cuh).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_f32.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace tc = mma_attention;  // the tensor-core kernels
namespace {

constexpr int kWarps = kThreads / 32, kPerLane = kMaxHead / 32;

// Elements lane, lane + 32, ... of a row of n (0 past its end).
template <typename T>
__device__ __forceinline__ void load(const T* row, int64_t n, int64_t stride, int lane, float (&out)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t e = lane + 32 * i;
    out[i] = e < n ? to_float(row[e * stride]) : 0.f;
  }
}

template <typename T>
__device__ __forceinline__ void store(T* row, int64_t n, int64_t stride, int lane, const float (&in)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t e = lane + 32 * i;
    if (e < n) row[e * stride] = from_float<T>(in[i]);
  }
}

// The dot product of a lane-held row with elements lane + 32 i of `row` at `stride`, in every lane.
template <typename T>
__device__ __forceinline__ float dot(const float (&a)[kPerLane], const T* row, int64_t n, int64_t stride, int lane) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t e = lane + 32 * i;
    if (e < n) s += a[i] * to_float(row[e * stride]);
  }
  return warp_sum(s);
}

// The dot product of two lane-held rows, in every lane.
__device__ __forceinline__ float lane_dot(const float (&a)[kPerLane], const float (&b)[kPerLane]) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) s += a[i] * b[i];
  return warp_sum(s);
}

// Score (r, j) of a pair whose K starts at ki, not masked: scale q.k + bias.
template <typename T>
__device__ __forceinline__ float score(const Attention& a, const AttentionPair<T>& p, const float (&q)[kPerLane],
                                       const T* ki, int64_t r, int64_t j, float scale, int lane) {
  return dot(q, ki + j * a.k.row, a.d, 1, lane) * scale + bias_at(a, p.bias, r, j);
}

template <typename T>
__global__ void forward_kernel(Attention a, const T* q, const T* k, const T* v, T* y, float* lse) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= a.pairs * a.tq) return;
  const int64_t pair = row / a.tq, r = row % a.tq;
  const AttentionPair<T> p = pair_of<T>(a, pair);
  const float scale = scalar_or<T>(a.scale, 1.f), fill = scalar_or<T>(a.fill, 0.f);
  const T *ki = k + a.k.at(p.kv), *vi = v + a.v.at(p.kv);  // (the pair's K and V rows' start, out of the loop)
  float qv[kPerLane], acc[kPerLane] = {}, vj[kPerLane];
  load(q + a.q.at(pair, r), a.d, 1, lane, qv);
  float m = -INFINITY, l = 0;
  for (int64_t j = 0; j < a.tk; ++j) {
    const float s = masked(a, p.cond, r, j) ? fill : score(a, p, qv, ki, r, j, scale, lane);
    const float mn = fmaxf(m, s);
    if (mn == -INFINITY) continue;  // every score so far -inf: nothing to add yet
    const float alpha = __expf(m - mn), e = __expf(s - mn);
    l = l * alpha + e;
    m = mn;
    const float pd = a.dropout && !keeps(a, row, j) ? 0.f : a.dropout ? e * a.keep_scale : e;
    load(vi + j * a.v.row, a.dv, 1, lane, vj);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] = acc[i] * alpha + pd * vj[i];
  }
  const bool empty = l == 0;  // a fully masked row: NaN as Softmax gives, or zeros
  const float inv = empty ? (a.zero_masked_rows ? 0.f : NAN) : 1.f / l;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] *= inv;
  store(y + a.y.at(pair, r), a.dv, 1, lane, acc);
  if (lse && lane == 0) lse[row] = empty ? (a.zero_masked_rows ? INFINITY : NAN) : m + logf(l);
}

// dQ, and each row's D = rowsum(dY Y) for the key kernel.
template <typename T>
__global__ void dq_kernel(Attention a, const T* dy, const T* q, const T* k, const T* v, const T* y, const float* lse,
                          float* row_dots, T* dq) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= a.pairs * a.tq) return;
  const int64_t pair = row / a.tq, r = row % a.tq;
  const AttentionPair<T> p = pair_of<T>(a, pair);
  const float scale = scalar_or<T>(a.scale, 1.f);
  const T *ki = k + a.k.at(p.kv), *vi = v + a.v.at(p.kv);
  float qv[kPerLane], dyv[kPerLane], acc[kPerLane] = {};
  load(q + a.q.at(pair, r), a.d, 1, lane, qv);
  load(dy + a.y.at(pair, r), a.dv, 1, lane, dyv);
  const float dr = dot(dyv, y + a.y.at(pair, r), a.dv, 1, lane), lr = lse[row];
  if (lane == 0) row_dots[row] = dr;
  for (int64_t j = 0; j < a.tk; ++j) {
    if (masked(a, p.cond, r, j)) continue;  // (the fill is a constant: no gradient through it)
    const float e = __expf(score(a, p, qv, ki, r, j, scale, lane) - lr);
    float dp = dot(dyv, vi + j * a.v.row, a.dv, 1, lane);
    if (a.dropout) dp = keeps(a, row, j) ? dp * a.keep_scale : 0.f;
    const float ds = e * (dp - dr) * scale;
    const T* kj = ki + j * a.k.row;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < a.d) acc[i] += ds * to_float(kj[c]);
    }
  }
  store(dq + a.q.at(pair, r), a.d, 1, lane, acc);
}

// dK and dV of key j of K and V batch index kv: the sums over every query row of every pair reading them.
template <typename T>
__global__ void dkv_kernel(Attention a, const T* dy, const T* q, const T* k, const T* v,
                           const float* lse, const float* row_dots, T* dk_out, T* dvo) {
  const int lane = threadIdx.x % 32;
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (w >= a.kv_count * a.tk) return;
  const int64_t kv = w / a.tk, j = w % a.tk;
  const float scale = scalar_or<T>(a.scale, 1.f), fill = scalar_or<T>(a.fill, 0.f);
  float kj[kPerLane], vj[kPerLane], dk[kPerLane] = {}, dvv[kPerLane] = {}, x[kPerLane];
  load(k + a.k.at(kv, j), a.d, 1, lane, kj);
  load(v + a.v.at(kv, j), a.dv, 1, lane, vj);
  for (KvPairs pairs{kv}; pairs.next(a) < a.pairs;) {
    const int64_t pair = pairs.pair;
    const AttentionPair<T> p = pair_of<T>(a, pair);
    const T *qi = q + a.q.at(pair), *dyi = dy + a.y.at(pair);  // (the pair's rows' starts, out of the loop)
    for (int64_t r = 0; r < a.tq; ++r) {
      const int64_t row = pair * a.tq + r;
      const bool off = masked(a, p.cond, r, j);
      float s = fill;
      if (!off) {
        load(qi + r * a.q.row, a.d, 1, lane, x);
        s = lane_dot(x, kj) * scale + bias_at(a, p.bias, r, j);
      }
      const float e = __expf(s - lse[row]);
      if (e == 0.f) continue;
      const bool keep = !a.dropout || keeps(a, row, j);
      const float pd = !keep ? 0.f : a.dropout ? e * a.keep_scale : e;
      float g[kPerLane];
      load(dyi + r * a.y.row, a.dv, 1, lane, g);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) dvv[i] += pd * g[i];
      if (off) continue;
      float dp = lane_dot(g, vj);
      if (a.dropout) dp = keep ? dp * a.keep_scale : 0.f;
      const float ds = e * (dp - row_dots[row]) * scale;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) dk[i] += ds * x[i];
    }
  }
  store(dk_out + a.k.at(kv, j), a.d, 1, lane, dk);
  store(dvo + a.v.at(kv, j), a.dv, 1, lane, dvv);
}

// dQ's float32 sums (a.sums' rows) cast into dQ's rows in X (packed): an element a thread.
template <typename T>
__global__ void cast_rows(Attention a, const float* sums, T* dq) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.pairs * a.tq * a.d) return;
  const int64_t row = i / a.d, c = i % a.d, pair = row / a.tq, r = row % a.tq;
  dq[a.q.at(pair, r) + c] = from_float<T>(sums[a.sums.at(pair, r) + c]);
}

unsigned to_blocks(int64_t units, int64_t per_block, const char* kernel) {
  const int64_t blocks = (units + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) launch_error(std::string(kernel) + ": more than 2^31 blocks");
  return unsigned(blocks);
}

// ONNXTRAIN_CUDA_ATTENTION, for comparison: "simple" takes the warp-per-row kernels for every dtype, "general" the
// tensor-core kernels' general build alone (attention_builds.cuh).
bool attention_env_is(const char* mode) {
  const char* v = std::getenv("ONNXTRAIN_CUDA_ATTENTION");
  return v && std::strcmp(v, mode) == 0;
}

bool simple_kernels() {
  static const bool simple = attention_env_is("simple");
  return simple;
}

// The tensor-core kernels' head size (attention_mma.cuh) for 16-bit operands with heads of at most 128 elements;
// 0 for the others: float32 operands, larger heads, or all of them with ONNXTRAIN_CUDA_ATTENTION=simple.
int mma_head(DType t, const Attention& a) {
  const int64_t head = std::max(a.d, a.dv);
  if (simple_kernels() || (t != DType::kFloat16 && t != DType::kBFloat16)) return 0;
  return head <= 64 ? 64 : head <= 128 ? 128 : 0;
}

// Whether float32 operands take the tiled kernels (attention_f32.cuh): heads of at most 64 elements, unless
// ONNXTRAIN_CUDA_ATTENTION=simple.
bool f32_tiles(const Attention& a) { return !simple_kernels() && std::max(a.d, a.dv) <= tc::kF32Head; }

// The tensor-core kernels' map of the tiles a mask or a bias changes (attention_tile_kind.cuh), into a.kinds.
template <typename T>
void map_tile_kinds(const Attention& a, const char* name, cudaStream_t stream) {
  if (!a.cond && !a.bias) return;
  if (!a.kinds) launch_error(std::string(name) + ": no map of its mask's tiles");
  check(cudaMemsetAsync(a.mixed, 0, kMixedBytes, stream), name);
  if (a.pairs * a.tq * a.tk == 0) return;
  tc::tile_kinds<T><<<to_blocks(tc::tile_kinds_blocks(a), 1, name), tc::kBlock, 0, stream>>>(a);
}

// Whether the tensor-core kernels take their general build alone (ONNXTRAIN_CUDA_ATTENTION=general).
bool general_build() {
  static const bool general = attention_env_is("general");
  return general;
}

// f.template operator()<D>() for the tensor-core kernels' head size D.
template <typename F>
void with_head(int head, F&& f) {
  if (head == 64)
    f.template operator()<64>();
  else
    f.template operator()<128>();
}

}  // namespace

void flash_attention(DType t, const Attention& a, const void* q, const void* k, const void* v, void* y, float* lse,
                     cudaStream_t stream) {
  const int64_t rows = a.pairs * a.tq;
  if (rows == 0) return;
  const int head = mma_head(t, a);
  bool ok = with_float_type(t, [&](auto x) {
    using T = decltype(x);
    const T *qt = static_cast<const T*>(q), *kt = static_cast<const T*>(k), *vt = static_cast<const T*>(v);
    if constexpr (std::is_same_v<T, float>)
      if (f32_tiles(a)) {
        map_tile_kinds<T>(a, "FlashAttention", stream);
        const int64_t blocks = to_blocks(a.tq, tc::kTile, "FlashAttention") * a.pairs;
        tc::forward_f32<<<to_blocks(blocks, 1, "FlashAttention"), tc::kBlock, 0, stream>>>(a, qt, kt, vt,
                                                                                         static_cast<T*>(y), lse);
        return;
      }
    if constexpr (!std::is_same_v<T, float>)
      if (head) {
        map_tile_kinds<T>(a, "FlashAttention", stream);
        const int64_t blocks = to_blocks(a.tq, tc::kTile, "FlashAttention") * a.pairs;
        return with_head(head, [&]<int D>() {
          tc::with_builds(a, general_build(), [&]<bool kLean>(const Attention& b) {
            tc::forward<T, D, kLean><<<to_blocks(blocks, 1, "FlashAttention"), tc::kBlock, 0, stream>>>(
                b, qt, kt, vt, static_cast<T*>(y), lse);
          });
        });
      }
    forward_kernel<<<to_blocks(rows, kWarps, "FlashAttention"), kThreads, 0, stream>>>(a, qt, kt, vt,
                                                                                        static_cast<T*>(y), lse);
  });
  if (!ok) unsupported_dtype("FlashAttention", t);
  check_launch("FlashAttention");
}

void flash_attention_grad(DType t, const Attention& a, const void* dy, const void* q, const void* k, const void* v,
                          const void* y, const float* lse, float* row_dots, float* dq_sums, void* dq, void* dk,
                          void* dv, cudaStream_t stream) {
  const int64_t rows = a.pairs * a.tq, keys = a.kv_count * a.tk;
  const int head = mma_head(t, a);
  bool ok = with_float_type(t, [&](auto x) {
    using T = decltype(x);
    const T *dyt = static_cast<const T*>(dy), *qt = static_cast<const T*>(q), *kt = static_cast<const T*>(k),
            *vt = static_cast<const T*>(v);
    bool tiled = head != 0;  // (the tiled kernels sum dQ in float32 by atomics, then cast the sums into dQ)
    if constexpr (std::is_same_v<T, float>) tiled = f32_tiles(a);
    if (tiled) {
      const char* name = "FlashAttentionGrad";
      map_tile_kinds<T>(a, name, stream);
      float* sums = dq_sums;
      if constexpr (std::is_same_v<T, float>)
        if (!a.packed) sums = static_cast<float*>(dq);  // (dQ lies as its sums: summed in place)
      if (!sums) launch_error(std::string(name) + ": no scratch for dQ's sums (summed_dq)");
      if (rows) {
        tc::row_dots<T><<<to_blocks(rows, tc::kBlock / 32, name), tc::kBlock, 0, stream>>>(
            a, dyt, static_cast<const T*>(y), row_dots);
        check(cudaMemsetAsync(sums, 0, size_t(rows * a.d) * sizeof(float), stream), name);
      }
      if (keys) {  // (no rows: dK and dV zeros)
        if constexpr (std::is_same_v<T, float>) {
          const int64_t blocks = to_blocks(a.tk, tc::kF32Keys, name) * a.kv_count;
          tc::grad_f32<<<to_blocks(blocks, 1, name), tc::kBlock, 0, stream>>>(a, dyt, qt, kt, vt, lse, row_dots, sums,
                                                                             static_cast<T*>(dk), static_cast<T*>(dv));
        } else {
          with_head(head, [&]<int D>() {
            const int64_t blocks = to_blocks(a.tk, tc::kTile, name) * a.kv_count;
            tc::with_builds(a, general_build(), [&]<bool kLean>(const Attention& b) {
              tc::grad<T, D, kLean><<<to_blocks(blocks, 1, name), tc::kBlock, 0, stream>>>(
                  b, dyt, qt, kt, vt, lse, row_dots, sums, static_cast<T*>(dk), static_cast<T*>(dv));
            });
          });
        }
      }
      if (a.packed)  // (no keys: dQ zeros)
        cast_rows<T><<<to_blocks(rows * a.d, kThreads, name), kThreads, 0, stream>>>(a, sums, static_cast<T*>(dq));
      else if (sums != dq)
        cast(DType::kFloat32, t, sums, dq, rows * a.d, stream);
      return;
    }
    if (rows)
      dq_kernel<<<to_blocks(rows, kWarps, "FlashAttentionGrad"), kThreads, 0, stream>>>(
          a, dyt, qt, kt, vt, static_cast<const T*>(y), lse, row_dots, static_cast<T*>(dq));
    if (keys)  // (after dq_kernel on the stream: it reads the rows' D)
      dkv_kernel<<<to_blocks(keys, kWarps, "FlashAttentionGrad"), kThreads, 0, stream>>>(
          a, dyt, qt, kt, vt, lse, row_dots, static_cast<T*>(dk), static_cast<T*>(dv));
  });
  if (!ok) unsupported_dtype("FlashAttentionGrad", t);
  check_launch("FlashAttentionGrad");
}

}  // namespace onnxtrain::kernels::cuda
