// The tiles and warp products the tensor-core attention kernels (attention_mma.cuh) are made of: operands staged
// from global into shared memory as they lie there (by cp.async where rows allow), a warp's rows as A operands,
// products over a staged tile (warp_mma.cuh's instruction, its B operands read by ldmatrix as rows or transposed),
// accumulators stored as rows, reductions over the 4 lanes that hold a row. In namespace
// ONNXTRAIN_MMA_ATTENTION, mma_attention unless the includer names another (the tests' warp emulation does, for its
// host copy).
#pragma once
#include <cmath>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/warp_mma.cuh"

#ifndef ONNXTRAIN_MMA_ATTENTION
#define ONNXTRAIN_MMA_ATTENTION mma_attention
#endif

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

constexpr int kBlock = 128, kTile = 64;  // threads a block; rows a block owns and keys a step (queries: kQueries)

template <typename T>
__device__ __forceinline__ const uint16_t* bits(const T* p) {
  return reinterpret_cast<const uint16_t*>(p);
}

// Element (r, c) of a (rows, cols) matrix whose rows lie ld elements apart, 0 outside it.
__device__ __forceinline__ uint16_t at(const uint16_t* m, int64_t r, int64_t c, int64_t rows, int64_t cols,
                                       int64_t ld) {
  return r < rows && c < cols ? m[r * ld + c] : uint16_t(0);
}

// A warp's 16 rows r0 .. r0 + 15 of a (rows, cols) matrix in global memory (rows ld elements apart) as A operands,
// k-step kk in a[kk].
template <int D>
__device__ __forceinline__ void a_global(uint32_t (&a)[D / 16][4], const uint16_t* m, int64_t r0, int64_t rows,
                                         int64_t cols, int64_t ld, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int64_t c = 16 * kk + 2 * t;
    a[kk][0] = join(at(m, r0 + g, c, rows, cols, ld), at(m, r0 + g, c + 1, rows, cols, ld));
    a[kk][1] = join(at(m, r0 + g + 8, c, rows, cols, ld), at(m, r0 + g + 8, c + 1, rows, cols, ld));
    a[kk][2] = join(at(m, r0 + g, c + 8, rows, cols, ld), at(m, r0 + g, c + 9, rows, cols, ld));
    a[kk][3] = join(at(m, r0 + g + 8, c + 8, rows, cols, ld), at(m, r0 + g + 8, c + 9, rows, cols, ld));
  }
}

// Rows r0 .. r0 + R - 1 and columns c0 .. c0 + C - 1 of a (rows, cols) matrix whose rows lie ld elements apart into
// s[r][c], zeros outside the matrix: by cp.async where its rows allow copies of 16 bytes (cols and ld multiples of
// 8, m 16-byte aligned), the caller then committing and waiting (async_copy.cuh), else an element at a time.
// Consecutive threads take consecutive 16 bytes of a row. A tile inside the matrix (a step's, but the last's) is read
// with no bound tested and 32-bit offsets from its first element.
template <int R, int C, int S>
__device__ __forceinline__ void stage(uint16_t (*s)[S], const uint16_t* m, int64_t r0, int64_t c0, int64_t rows,
                                      int64_t cols, int64_t ld) {
  static_assert(C % 8 == 0 && R * C / 8 % kBlock == 0, "whole 16-byte copies, as many for each thread");
  const bool wide = cols % 8 == 0 && ld % 8 == 0 && c0 % 8 == 0 && reinterpret_cast<uintptr_t>(m) % 16 == 0;
  if (wide && r0 + R <= rows && c0 + C <= cols && ld <= 0x7fffffff / R) {
    const uint16_t* tile = m + r0 * ld + c0;
    const int step = int(ld);
#pragma unroll
    for (int k = 0; k < R * C / 8 / kBlock; ++k) {
      const unsigned i = threadIdx.x + unsigned(k * kBlock), r = i / (C / 8), c = i % (C / 8) * 8;
      copy16_async(&s[r][c], tile + (int(r) * step + int(c)));
    }
  } else if (wide) {
    for (int i = threadIdx.x; i < R * C / 8; i += kBlock) {
      const int r = i / (C / 8), c = i % (C / 8) * 8;
      const bool in = r0 + r < rows && c0 + c < cols;
      copy16_async(&s[r][c], in ? m + (r0 + r) * ld + c0 + c : m, in ? 16 : 0);
    }
  } else {
    for (int i = threadIdx.x; i < R * C; i += kBlock)
      s[i / C][i % C] = at(m, r0 + i / C, c0 + i % C, rows, cols, ld);
  }
}

// A block's steps pipelined through S slots of shared memory (S = 2: the next step's copies issued as the warps start
// on this one's; 1: once they are done with it), each step's operands staged by stage(slot, step), which issues their
// copies and commits them (a group a call, empty for a step past the last):
//   stage(0, step);
//   for (int n = 0; <step is one>; ++n) {
//     const Step following = step_ahead<S>(n, next(step), stage);
//     <the step's work, from slot n % S>
//     step_behind<S>(following, stage);
//     step = following;
//   }
// (A loop the kernel writes, not a function taking the work: grad's accumulators went to local memory when its
// work was a lambda.) step_ahead waits for this step's copies and syncs the block, then where there are two slots
// stages the following step into the other, which the step before read: past the barrier every warp is done with it,
// so that a step takes one barrier. step_behind, where there is one slot, syncs the block (the step's operands read)
// and stages the following.
template <int S, typename Step, typename Stage>
__device__ __forceinline__ Step step_ahead(int n, Step following, Stage&& stage) {
  static_assert(S == 1 || S == 2, "one slot, or two");
  wait_copies<0>();
  __syncthreads();
  if constexpr (S == 2) stage(1 - n % 2, following);
  return following;
}

template <int S, typename Step, typename Stage>
__device__ __forceinline__ void step_behind(const Step& following, Stage&& stage) {
  if constexpr (S == 1) {
    __syncthreads();
    stage(0, following);
  }
}

// c[nt] = A B over the tile's N / 8 columns of 8 (N a multiple of 16), k over D: B(k, n) = s[n][k], or s[k][n]
// (kTrans).
template <typename T, int D, int N, bool kTrans, int S>
__device__ __forceinline__ void product_rows(float (&c)[N / 8][4], const uint32_t (&a)[D / 16][4],
                                             const uint16_t (*s)[S], int lane) {
#pragma unroll
  for (int np = 0; np < N / 16; ++np) {
#pragma unroll
    for (int i = 0; i < 4; ++i) c[2 * np][i] = c[2 * np + 1][i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];
      b_tiles<kTrans>(b, s, 16 * np, 16 * kk, lane);
      mma<T>(c[2 * np], a[kk], b[0], b[1]);
      mma<T>(c[2 * np + 1], a[kk], b[2], b[3]);
    }
  }
}

// c[nt] += P B over D / 8 columns of 8: P the accumulators p (K / 8 tiles of 8 columns) as A operands rounded to T,
// B(k, n) = s[n][k], or s[k][n] (kTrans), for k < K.
template <typename T, int D, int K, bool kTrans, int S>
__device__ __forceinline__ void product_accumulators(float (&c)[D / 8][4], const float (&p)[K / 8][4],
                                                     const uint16_t (*s)[S], int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t pa[4];
    a_accumulators<T>(pa, p, kk);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t b[4];
      b_tiles<kTrans>(b, s, 16 * np, 16 * kk, lane);
      mma<T>(c[2 * np], pa, b[0], b[1]);
      mma<T>(c[2 * np + 1], pa, b[2], b[3]);
    }
  }
}

// A warp's accumulators c (rows r0 + g and r0 + g + 8, D columns) into a matrix of `cols` columns whose rows lie ld
// elements apart, each row's times mult[0] and mult[1]; rows past `rows` and columns past `cols` left out.
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* m, const float (&c)[D / 8][4], int64_t r0, int64_t rows, int64_t cols,
                                           int64_t ld, const float (&mult)[2], int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = r0 + g + 8 * h;
    if (r >= rows) continue;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (const int col = 8 * nt + 2 * t + e; col < cols)
          m[r * ld + col] = from_float<T>(c[nt][2 * h + e] * mult[h]);
  }
}

// A warp's accumulators c (its rows r0 + g and r0 + g + 8 by N columns) rounded to T into rows r0 .. of shared
// memory s (rows of S elements), two columns a 32-bit store.
template <typename T, int N, int S>
__device__ __forceinline__ void accumulators_to_shared(uint16_t (*s)[S], const float (&c)[N / 8][4], int r0, int g,
                                                       int t) {
#pragma unroll
  for (int nt = 0; nt < N / 8; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<uint32_t*>(&s[r0 + g + 8 * h][8 * nt + 2 * t]) = pack<T>(c[nt][2 * h], c[nt][2 * h + 1]);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
// 2^x by the multiprocessor's approximation (__expf(x) is 2^(x log2 e) by the same), so that an exponent's scale
// and offset fold into one fused multiply-add; the host's exp2 in the tests' emulation.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp2_approx(float x) {
#ifdef __CUDACC__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Where a warp's accumulator element i of 8-column tile nt sits: row (0 .. 15) and column (0 .. 8 nt + 7).
__device__ __forceinline__ int row_of(int i, int g) { return g + 8 * (i / 2); }
__device__ __forceinline__ int column_of(int nt, int i, int t) { return 8 * nt + 2 * t + i % 2; }

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
