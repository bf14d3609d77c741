// One small row-major GEMM, C (m, n) = A (m, k) B (k, n), on the calling thread, as attention's batched
// products call it: in tiles of up to 32 rows (OpenBLAS's small-matrix kernels run them ~20% faster than one
// call), each tile over the band of k where its rows of A and columns of B are not all zero. A causal
// attention's probabilities and their gradients are triangular: their products skip half of the work.
// Skipping is exact: the skipped products are zeros added to sums that start from +0; when A or B holds an
// infinity or a NaN (0 * inf is NaN) nothing is skipped.
#pragma once
#include <cstdint>

namespace onnxtrain::kernels {

template <typename T>
void small_gemm(int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c);

}  // namespace onnxtrain::kernels
