// A warp's tensor-core product, PTX's mma.sync.m16n8k16 (sm_80 on) with 16-bit operands and float32 accumulators,
// and the fragments it takes from shared memory and from an earlier product's accumulators. In PTX's layouts, lane
// = 4 g + t (g = lane / 4, t = lane % 4), each 32-bit register holding two consecutive k (the lower one in its low
// half):
//   A (16 x 16, rows of k): a[0] row g, k 2t; a[1] row g + 8, k 2t; a[2] row g, k 2t + 8; a[3] row g + 8, k 2t + 8
//   B (16 x 8, columns of k): b[0] k 2t, column g; b[1] k 2t + 8, column g
//   C (16 x 8): c[0], c[1] row g, columns 2t, 2t + 1; c[2], c[3] row g + 8, the same columns
// Compiled by nvcc, mma() is the instruction; compiled for the host (the tests' warp emulation,
// tests/cpp/warp_emulation.h), mma_f16 and mma_bf16 are declared here and defined by the emulation.
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

// Two consecutive 16-bit elements as one register (p 4-byte aligned); two elements joined.
__device__ __forceinline__ uint32_t word(const uint16_t* p) {
#ifndef __CUDACC__
  if (reinterpret_cast<uintptr_t>(p) % 4) __builtin_trap();  // a GPU faults on a misaligned word: so does the host
#endif
  return *reinterpret_cast<const uint32_t*>(p);
}
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

// Rows r0 .. r0 + 15, k0 .. k0 + 15 of a row-major tile (rows of S elements) as an A operand.
template <int S>
__device__ __forceinline__ void a_rows(uint32_t (&a)[4], const uint16_t (*s)[S], int r0, int k0, int g, int t) {
  a[0] = word(&s[r0 + g][k0 + 2 * t]);
  a[1] = word(&s[r0 + g + 8][k0 + 2 * t]);
  a[2] = word(&s[r0 + g][k0 + 2 * t + 8]);
  a[3] = word(&s[r0 + g + 8][k0 + 2 * t + 8]);
}

// The B operand (k0 .. k0 + 15, n0 .. n0 + 7) where B(k, n) = s[n][k]: a tile's rows are B's columns.
template <int S>
__device__ __forceinline__ void b_rows(uint32_t& b0, uint32_t& b1, const uint16_t (*s)[S], int n0, int k0, int g,
                                       int t) {
  b0 = word(&s[n0 + g][k0 + 2 * t]);
  b1 = word(&s[n0 + g][k0 + 2 * t + 8]);
}

// The B operand (k0 .. k0 + 15, n0 .. n0 + 7) where B(k, n) = s[k][n]: a tile's rows are B's rows.
template <int S>
__device__ __forceinline__ void b_cols(uint32_t& b0, uint32_t& b1, const uint16_t (*s)[S], int k0, int n0, int g,
                                       int t) {
  const int k = k0 + 2 * t, n = n0 + g;
  b0 = join(s[k][n], s[k + 1][n]);
  b1 = join(s[k + 8][n], s[k + 9][n]);
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
