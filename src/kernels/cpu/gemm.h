// GEMM through oneDNN for float, CBLAS (OpenBLAS) for double, a plain loop for integers.
#pragma once
#include <cstdint>

namespace onnxtrain::kernels {

// C (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * C, row-major;
// lda/ldb/ldc are the row strides of A, B and C as stored.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace onnxtrain::kernels
