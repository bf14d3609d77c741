// A warp's tensor-core product, PTX's mma.sync.m16n8k16 (sm_80 on) with 16-bit operands and float32 accumulators,
// and the fragments it takes from shared memory (by ldmatrix, as rows or transposed) and from an earlier product's
// accumulators. In PTX's layouts, lane = 4 g + t (g = lane / 4, t = lane % 4), each 32-bit register holding two
// consecutive k (the lower one in its low half):
//   A (16 x 16, rows of k): a[0] row g, k 2t; a[1] row g + 8, k 2t; a[2] row g, k 2t + 8; a[3] row g + 8, k 2t + 8
//   B (16 x 8, columns of k): b[0] k 2t, column g; b[1] k 2t + 8, column g
//   C (16 x 8): c[0], c[1] row g, columns 2t, 2t + 1; c[2], c[3] row g + 8, the same columns
// Compiled by nvcc, mma() and ldmatrix_x4() are the instructions; compiled for the host (the tests' warp emulation,
// tests/cpp/warp_emulation.h), mma_f16, mma_bf16 and ldmatrix_x4 are declared here and defined by the emulation.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {

#ifdef __CUDACC__
#define ONNXTRAIN_MMA(types)                                                                                   \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." types ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
               "{%8, %9}, {%0, %1, %2, %3};"                                                               \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ONNXTRAIN_MMA("f16.f16");
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ONNXTRAIN_MMA("bf16.bf16");
}
#undef ONNXTRAIN_MMA
#else
void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
#endif

// c += A B, operands of T (__half or __nv_bfloat16).
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    mma_f16(c, a, b0, b1);
  else
    mma_bf16(c, a, b0, b1);
}

// Two 16-bit elements joined as one register, the first in its low half.
__device__ __forceinline__ uint32_t join(uint16_t lo, uint16_t hi) { return lo | uint32_t(hi) << 16; }

// Two floats rounded to T, as one register.
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const T l = from_float<T>(lo), h = from_float<T>(hi);
  uint16_t x, y;
  memcpy(&x, &l, 2);
  memcpy(&y, &h, 2);
  return join(x, y);
}

// Four 8 x 8 matrices of 16-bit elements from shared memory (PTX's ldmatrix .x4): lane 8 i + r names row r of
// matrix i, at element `at` of `base` (16 bytes, 16-byte aligned), and r[i] gets the lane's part of matrix i as a
// fragment holds it, row g and columns 2t, 2t + 1; kTrans: of matrix i transposed, its rows 2t and 2t + 1 at column
// g. (One shared address of `base` and offsets from it, which the instruction can hold.) Compiled for the host, the
// emulation defines it.
#ifdef __CUDACC__
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* base, int at) {
  const unsigned row = unsigned(__cvta_generic_to_shared(base)) + 2u * unsigned(at);
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}
#else
void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row, bool trans);
template <bool kTrans>
void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* base, int at) {
  ldmatrix_x4(r, base + at, kTrans);
}
#endif

// The A operand (rows r0 .. r0 + 15, k0 .. k0 + 15) of a tile in shared memory (rows of S elements) holding A(r, k)
// at s[r][k], or at s[k][r] (kTrans).
template <bool kTrans, int S>
__device__ __forceinline__ void a_tile(uint32_t (&a)[4], const uint16_t (*s)[S], int r0, int k0, int lane) {
  const int r = lane % 8, down = lane / 8 % 2 * 8, right = lane / 16 * 8;  // matrix i: rows + 8 (i % 2), k + 8 (i / 2)
  ldmatrix_x4<kTrans>(a, s[0], kTrans ? (k0 + right + r) * S + r0 + down : (r0 + down + r) * S + k0 + right);
}

// B operands (k0 .. k0 + 15) of two 8-column tiles, columns n0 .. n0 + 7 in b[0], b[1] and n0 + 8 .. n0 + 15 in b[2],
// b[3], of a tile in shared memory holding B(k, n) at s[n][k] (a tile's rows are B's columns), or at s[k][n]
// (kTrans: its rows are B's rows).
template <bool kTrans, int S>
__device__ __forceinline__ void b_tiles(uint32_t (&b)[4], const uint16_t (*s)[S], int n0, int k0, int lane) {
  const int r = lane % 8, deep = lane / 8 % 2 * 8, next = lane / 16 * 8;  // matrix i: k + 8 (i % 2), n + 8 (i / 2)
  ldmatrix_x4<kTrans>(b, s[0], kTrans ? (k0 + deep + r) * S + n0 + next : (n0 + next + r) * S + k0 + deep);
}

// Columns 16 kk .. 16 kk + 15 of accumulators c (16 x 8 tiles side by side), rounded to T, as an A operand: the
// probabilities of a product of scores feed the next product.
template <typename T, int N>
__device__ __forceinline__ void a_accumulators(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
  a[0] = pack<T>(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack<T>(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

}  // namespace onnxtrain::kernels::cuda
