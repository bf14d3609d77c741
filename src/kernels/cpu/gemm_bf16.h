// bfloat16 GEMM with float32 accumulation through oneDNN's matmul (AVX512_BF16 dot products where the CPU has
// them: cpu::features().avx512_bf16; kernels take the float32 path through in_float32 elsewhere).
#pragma once
#include <cstddef>
#include <cstdint>

#include "onnxtrain/dtype.h"

namespace onnxtrain::kernels {

// Whether the bf16 GEMM runs natively on this CPU (else bf16 matrix products compute in float32).
bool gemm_bf16_native();

// How many primitives this thread keeps (at most oneDNN's primitive cache capacity: ONEDNN_PRIMITIVE_CACHE_CAPACITY).
size_t gemm_bf16_primitives();

// One operand: `batch` matrices of (rows, cols) as op() reads them, each at `stride` elements after the previous
// (0: the same matrix for every batch), rows `ld` apart as stored, read transposed when `trans`.
struct Bf16Operand {
  const BFloat16* data;
  int64_t ld, stride = 0;
  bool trans = false;
};

// C[i] (m, n) = alpha * op(A[i]) (m, k) op(B[i]) (k, n) + bias (n) + (accumulate ? C[i] : 0) for i < batch, C[i]
// contiguous at c + i * m * n; rounded once, to bfloat16, or kept in float32.
void gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k, const Bf16Operand& a, const Bf16Operand& b, BFloat16* c,
               float alpha = 1, const BFloat16* bias = nullptr, bool accumulate = false);
void gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k, const Bf16Operand& a, const Bf16Operand& b, float* c,
               float alpha = 1, const BFloat16* bias = nullptr, bool accumulate = false);

}  // namespace onnxtrain::kernels
