// The cross-entropy's kernels over rows of scores (float32, or a 16-bit head's in its dtype; cross_entropy.cu launches
// them): a block per row for its log-sum-exp (one pass, online; the scores written into the head's logits on the way)
// and loss (a block reduction), the totals by double atomics; the scores' gradient by rows (8 columns a thread where
// rows allow; in the scores' place where asked). In a header so that the tests' warp emulation runs them on the host.
#pragma once
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.h"

namespace onnxtrain::kernels::cuda {

__device__ __forceinline__ int64_t target_of(const CrossEntropy& e, int64_t r) {
  return e.target_type == DType::kInt64 ? static_cast<const int64_t*>(e.target)[r]
                                        : int64_t(static_cast<const int32_t*>(e.target)[r]);
}
__device__ __forceinline__ bool ignored(const CrossEntropy& e, int64_t t) { return e.has_ignore && t == e.ignore; }

// The 16 / sizeof(S) scores from p (16-byte aligned) as floats into x.
template <typename S>
__device__ __forceinline__ void load16(const S* p, float* x) {
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  S v[16 / sizeof(S)];
  memcpy(static_cast<void*>(v), &w, 16);
#pragma unroll
  for (size_t k = 0; k < 16 / sizeof(S); ++k) x[k] = to_float(v[k]);
}

// v into dst: whole 16-byte writes where v's bytes are a multiple of 16 (dst 16-byte aligned), else an element each.
template <typename T, int N>
__device__ __forceinline__ void store16s(T* dst, const T (&v)[N]) {
  if constexpr (sizeof v % 16 == 0) {
    uint4 words[sizeof v / 16];
    memcpy(words, v, sizeof v);
#pragma unroll
    for (size_t k = 0; k < sizeof v / 16; ++k) reinterpret_cast<uint4*>(dst)[k] = words[k];
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) dst[k] = v[k];
  }
}

// A block a row, the scores read once (16 bytes at a time where the rows allow): each thread's maximum and its sum
// of exponents relative to it (online, rescaled once for each 16 bytes read), then the block's maximum and the sums
// rescaled to it; the scores rounded to T into `logits` (rows c apart) where it is given, on the way. The logits' rows
// are not 16-byte aligned (GPT-2's 50,257 classes), so each warp stages the elements it read in shared memory and
// writes them back a lane an element, each store whole sectors (a thread's own elements, 16 bytes apart among the
// lanes, took a 32-byte sector a 2-byte element: 4.3 GB of writes into L2 for a block of GPT-2's rows, 0.6 ms).
template <typename S, typename T>
__global__ void rows_kernel(CrossEntropy e, const S* s, float* lse, float* losses, double* totals, T* logits) {
  constexpr int P = 16 / sizeof(S), kWarps = kThreads / 32;
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  __shared__ __align__(16) T staged[kWarps][32 * P];
  const int64_t r = blockIdx.x;
  const S* row = s + r * e.ld;
  T* out = logits ? logits + r * e.c : nullptr;
  float mine = -INFINITY, sum = 0;
  auto take = [&](const float* x, int count) {  // (a NaN's exponent makes the sum NaN, as the loss)
    float m = mine;
    for (int k = 0; k < count; ++k) m = fmaxf(m, x[k]);
    if (m > mine) {
      sum *= expf(mine - m);
      mine = m;
    }
    for (int k = 0; k < count; ++k)
      if (x[k] != -INFINITY) sum += expf(x[k] - mine);
  };
  int64_t rest = 0;  // the first score not read 16 bytes at a time
  if (e.ld % P == 0 && reinterpret_cast<uintptr_t>(s) % 16 == 0) {
    rest = e.c / P * P;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int64_t w0 = int64_t(P) * 32 * warp; w0 < rest; w0 += int64_t(P) * kThreads) {  // (a warp's 32 P scores)
      const int64_t j = w0 + P * lane;
      if (j < rest) {
        float x[P];
        load16(row + j, x);
        take(x, P);
        if (out) {
          T v[P];
#pragma unroll
          for (int k = 0; k < P; ++k) v[k] = from_float<T>(x[k]);
          store16s(&staged[warp][P * lane], v);
        }
      }
      if (!out) continue;
      __syncwarp();
#pragma unroll
      for (int k = 0; k < P; ++k)
        if (w0 + 32 * k + lane < rest) out[w0 + 32 * k + lane] = staged[warp][32 * k + lane];
      __syncwarp();
    }
  }
  for (int64_t j = rest + threadIdx.x; j < e.c; j += kThreads) {
    const float x = to_float(row[j]);
    take(&x, 1);
    if (out) out[j] = from_float<T>(x);
  }
  const float m = block_all_reduce(mine, MaxOp(), tmp, &shared);
  sum = BlockReduce(tmp).Reduce(sum == 0.f ? 0.f : sum * expf(mine - m), SumOp());
  if (threadIdx.x != 0) return;
  const float l = isfinite(m) ? m + logf(sum) : m;
  lse[r] = l;
  const int64_t t = target_of(e, r);
  const bool skip = ignored(e, t);
  const float loss = skip ? 0.f : t < 0 || t >= e.c ? NAN : l - to_float(row[t]);
  if (losses) losses[r] = loss;
  atomicAdd(totals, double(loss));
  if (!skip) atomicAdd(totals + 1, 1.0);
}

// Launched over rows_grid(n, ld / V): V consecutive columns a thread (V = 8 where the rows allow 16-byte reads and
// writes, else 1), the row's weight, log-sum-exp and target read once for them; g may be s (a thread writes the
// columns it read).
template <typename S, typename T, int V>
__global__ void grad_kernel(CrossEntropy e, const S* s, const float* lse, const float* dloss, bool per_row, bool mean,
                            const double* totals, T* g) {
  const float scale = mean ? (totals[1] > 0 ? float(1.0 / totals[1]) : 0.f) : 1.f;
  for (int64_t r = blockIdx.y; r < e.n; r += gridDim.y) {
    const int64_t t = target_of(e, r);
    const float w = ignored(e, t) ? 0.f : (dloss ? dloss[per_row ? r : 0] : 1.f) * scale, l = lse[r];
    const S* sr = s + r * e.ld;
    T* gr = g + r * e.ld;
    for (int64_t j0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; j0 < e.ld;
         j0 += int64_t(gridDim.x) * blockDim.x * V) {
      float x[V];
      if constexpr (V == 8) {
        constexpr int P = 16 / sizeof(S);  // (a float32 row's 8 columns: two loads)
#pragma unroll
        for (int h = 0; h < V / P; ++h) load16(sr + j0 + h * P, x + h * P);
      } else {
        x[0] = to_float(sr[j0]);
      }
      T y[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int64_t j = j0 + k;
        y[k] = from_float<T>(j >= e.c ? 0.f : w * (expf(x[k] - l) - (j == t ? 1.f : 0.f)));
      }
      store16s(gr + j0, y);  // (V = 8: 16 or 32 bytes)
    }
  }
}

}  // namespace onnxtrain::kernels::cuda
