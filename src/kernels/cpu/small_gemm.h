// One small row-major GEMM, C (m, n) = op(A) (m, k) op(B) (k, n), op a transposition when ta / tb (A stored
// (k, m), B (n, k), unpadded), on the calling thread, as attention's batched
// products call it: where an operand has zeros to skip, in tiles of up to 32 rows, each tile over the band of k
// where its rows of A and columns of B are not all zero (else in one call). A causal attention's probabilities
// and their gradients are triangular: their products skip half of the work.
// Skipping drops only products that are exactly zero; when the other operand holds an infinity or a NaN
// (0 * inf is NaN) nothing is skipped.
#pragma once
#include <cstdint>

namespace onnxtrain::kernels {

template <typename T>
void small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c);

}  // namespace onnxtrain::kernels
