// The tiles and warp products the tensor-core attention kernels (attention_mma.cuh) are made of: operands staged
// from global into shared memory, a warp's rows as A operands, products over a staged tile (warp_mma.cuh's
// instruction), accumulators stored as rows, reductions over the 4 lanes that hold a row. In namespace
// ONNXTRAIN_MMA_ATTENTION, mma_attention unless the includer names another (the tests' warp emulation does, for its
// host copy).
#pragma once
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

// Element (r, c) of a row-major (rows, cols) matrix, 0 outside it.
__device__ __forceinline__ uint16_t at(const uint16_t* m, int64_t r, int64_t c, int64_t rows, int64_t cols) {
  return r < rows && c < cols ? m[r * cols + c] : uint16_t(0);
}

// A warp's 16 rows r0 .. r0 + 15 of a row-major (rows, cols) matrix in global memory as A operands, k-step kk in
// a[kk].
template <int D>
__device__ __forceinline__ void a_global(uint32_t (&a)[D / 16][4], const uint16_t* m, int64_t r0, int64_t rows,
                                         int64_t cols, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int64_t c = 16 * kk + 2 * t;
    a[kk][0] = join(at(m, r0 + g, c, rows, cols), at(m, r0 + g, c + 1, rows, cols));
    a[kk][1] = join(at(m, r0 + g + 8, c, rows, cols), at(m, r0 + g + 8, c + 1, rows, cols));
    a[kk][2] = join(at(m, r0 + g, c + 8, rows, cols), at(m, r0 + g, c + 9, rows, cols));
    a[kk][3] = join(at(m, r0 + g + 8, c + 8, rows, cols), at(m, r0 + g + 8, c + 9, rows, cols));
  }
}

// Rows a0 .. a0 + A - 1 and columns b0 .. b0 + B - 1 of a row-major (rows, cols) matrix into shared memory,
// element (a, b) at s[a][b], or at s[b][a] (kTranspose); zeros outside the matrix. 16 bytes a thread where the
// matrix's rows allow (8 elements, aligned), else an element each. Consecutive threads read along the matrix's rows,
// or, transposing, down its columns: they then write along a row of s (s's rows are a multiple of 16 elements plus
// 8 apart, so threads 8 elements apart along the matrix's rows would write one bank).
template <int A, int B, bool kTranspose, int S>
__device__ __forceinline__ void stage(uint16_t (*s)[S], const uint16_t* m, int64_t a0, int64_t b0, int64_t rows,
                                      int64_t cols) {
  if (cols % 8 == 0 && b0 % 8 == 0 && reinterpret_cast<uintptr_t>(m) % 16 == 0) {
    for (int i = threadIdx.x; i < A * B / 8; i += kBlock) {
      const int a = kTranspose ? i % A : i / (B / 8), b = (kTranspose ? i / A : i % (B / 8)) * 8;
      uint4 w = {0, 0, 0, 0};
      if (a0 + a < rows && b0 + b < cols) w = *reinterpret_cast<const uint4*>(m + (a0 + a) * cols + b0 + b);
      if constexpr (kTranspose) {
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) s[b + k][a] = uint16_t(words[k / 2] >> (16 * (k % 2)));
      } else {
        *reinterpret_cast<uint4*>(&s[a][b]) = w;
      }
    }
  } else {
    for (int i = threadIdx.x; i < A * B; i += kBlock) {
      const int a = i / B, b = i % B;
      const uint16_t e = at(m, a0 + a, b0 + b, rows, cols);
      if constexpr (kTranspose)
        s[b][a] = e;
      else
        s[a][b] = e;
    }
  }
}

// s[j][c] = element c of row j0 + j of a row-major (n, cols) matrix (V, Q, dY): R rows of D columns.
template <int R, int D>
__device__ __forceinline__ void stage_rows(uint16_t (*s)[D + 8], const uint16_t* m, int64_t j0, int64_t n,
                                           int64_t cols) {
  stage<R, D, false>(s, m, j0, 0, n, cols);
}

// s[j][c] = element j0 + j of row c of a row-major (cols, n) matrix (Kt: K's rows).
template <int D>
__device__ __forceinline__ void stage_columns(uint16_t (*s)[D + 8], const uint16_t* m, int64_t j0, int64_t n,
                                              int64_t cols) {
  stage<D, kTile, true>(s, m, 0, j0, cols, n);
}

// s[c][j] = element c of row j0 + j of a row-major (n, cols) matrix (V transposed).
template <int D>
__device__ __forceinline__ void stage_transposed(uint16_t (*s)[kTile + 8], const uint16_t* m, int64_t j0, int64_t n,
                                                 int64_t cols) {
  stage<kTile, D, true>(s, m, j0, 0, n, cols);
}

// c[nt] = A B over the tile's N / 8 columns of 8, B(k, n) = s[n][k] (k over D).
template <typename T, int D, int N, int S>
__device__ __forceinline__ void product_rows(float (&c)[N / 8][4], const uint32_t (&a)[D / 16][4],
                                             const uint16_t (*s)[S], int g, int t) {
#pragma unroll
  for (int nt = 0; nt < N / 8; ++nt) {
    c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b0, b1;
      b_rows<S>(b0, b1, s, 8 * nt, 16 * kk, g, t);
      mma<T>(c[nt], a[kk], b0, b1);
    }
  }
}

// c[nt] += P B over D / 8 columns of 8: P the accumulators p (K / 8 tiles of 8 columns) as A operands rounded to T,
// B(k, n) = s[n][k] (kRows) or s[k][n] for k < K.
template <typename T, int D, int K, bool kRows, int S>
__device__ __forceinline__ void product_accumulators(float (&c)[D / 8][4], const float (&p)[K / 8][4],
                                                     const uint16_t (*s)[S], int g, int t) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t pa[4];
    a_accumulators<T>(pa, p, kk);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      uint32_t b0, b1;
      if constexpr (kRows)
        b_rows<S>(b0, b1, s, 8 * nt, 16 * kk, g, t);
      else
        b_cols<S>(b0, b1, s, 16 * kk, 8 * nt, g, t);
      mma<T>(c[nt], pa, b0, b1);
    }
  }
}

// A warp's accumulators c (rows r0 + g and r0 + g + 8, D columns) into a row-major matrix of `cols` columns, each
// row's times mult[0] and mult[1]; rows past `rows` and columns past `cols` left out.
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* m, const float (&c)[D / 8][4], int64_t r0, int64_t rows, int64_t cols,
                                           const float (&mult)[2], int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = r0 + g + 8 * h;
    if (r >= rows) continue;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (const int col = 8 * nt + 2 * t + e; col < cols)
          m[r * cols + col] = from_float<T>(c[nt][2 * h + e] * mult[h]);
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Where a warp's accumulator element i of 8-column tile nt sits: row (0 .. 15) and column (0 .. 8 nt + 7).
__device__ __forceinline__ int row_of(int i, int g) { return g + 8 * (i / 2); }
__device__ __forceinline__ int column_of(int nt, int i, int t) { return 8 * nt + 2 * t + i % 2; }

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
