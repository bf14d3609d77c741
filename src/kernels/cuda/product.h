// One matrix product on the GPU from host-side code (matmul.cu's GEMM, no batch): what com.onnxtrain.Linear and the
// fused head's kernels (linear_cross_entropy.cpp) compute with.
#pragma once
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "onnxtrain/dtype.h"

namespace onnxtrain::kernels::cuda {

// C (m, n, contiguous) of dtype `out` = A B + base: A's element (i, k) at a[i * a_rs + k * a_cs], B's (k, j) at
// b[k * b_rs + j * b_cs], base's (i, j) at base[i * base_rs + j] (none when null). A and B of dtype t, float32
// accumulation; the base a bias row (base_rs 0) of dtype t, or a matrix shaped as C of dtype `out`, which may be C
// itself (a sum over products in place: float32 sums of 16-bit products); cuBLASLt's workspace `ws`.
void product(DType t, DType out, const void* a, int64_t a_rs, int64_t a_cs, const void* b, int64_t b_rs,
             int64_t b_cs, int64_t m, int64_t n, int64_t k, const void* base, int64_t base_rs, void* c, Workspace ws);

}  // namespace onnxtrain::kernels::cuda
