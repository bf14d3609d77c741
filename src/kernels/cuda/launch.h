// The CUDA kernels' launchers: plain pointers, sizes and small shape structs in, work queued on `stream` out.
// The .cu files define them (nvcc compiles nothing of the IR); the .cpp files beside them read nodes, check
// shapes and dtypes, and call them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace onnxtrain::kernels::cuda {

// A shape of up to kMaxRank dims, and where element (i0, i1, ...) of it sits in up to three arrays (element
// strides; 0 along a broadcast dim). Passed to kernels by value.
constexpr int kMaxRank = 8;
struct Indexing {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};
};

enum class Unary { kRelu, kNeg, kAbs, kExp, kLog, kSqrt, kReciprocal, kTanh, kSigmoid, kErf, kSin, kCos, kFloor, kCeil,
                   kGelu, kGeluTanh };
enum class Binary { kAdd, kSub, kMul, kDiv, kPow, kEqual, kLess, kLessOrEqual, kGreater, kGreaterOrEqual,
                    kAnd, kOr, kXor };

// y = op(x) over n elements of dtype t (float32, float16, bfloat16; Relu, Neg and Abs also int32, int64).
void unary(Unary op, DType t, const void* x, void* y, int64_t n, cudaStream_t stream);
// out = op(a, b) at each index of `ix` (strides 0: a, 1: b); comparisons write bool.
void binary(Binary op, DType t, const void* a, const void* b, void* out, const Indexing& ix, cudaStream_t stream);
// out = cond ? a : b (strides 0: cond, 1: a, 2: b), elements of `elem_bytes`.
void where(int elem_bytes, const bool* cond, const void* a, const void* b, void* out, const Indexing& ix,
           cudaStream_t stream);
// y = x converted from dtype `from` to `to` (float32, float16, bfloat16, float64, int32, int64, int8, uint8, bool).
void cast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t stream);
// dst[i] = the value of `elem_bytes` bytes at `value`, for n elements.
void fill(int elem_bytes, const void* value, void* dst, int64_t n, cudaStream_t stream);
// Up to kMaxRank int64 values written to dst (Shape, Size): no host buffer, no copy.
void write_int64(const int64_t (&values)[kMaxRank], int n, int64_t* dst, cudaStream_t stream);
// Dropout's counter-based mask (kernels/counter_random.h): y = keep ? x * scale : 0; the mask to `mask` if given.
void dropout(DType t, const void* x, void* y, bool* mask, int64_t n, uint64_t seed, uint32_t threshold, float scale,
             cudaStream_t stream);

// dst at its strides (ix.strides[0]) = src at its strides (ix.strides[1]), elements of `elem_bytes`: Transpose,
// Expand, Slice, Concat's parts, Identity.
void strided_copy(int elem_bytes, const void* src, void* dst, const Indexing& ix, cudaStream_t stream);

// Batched C = alpha * op(A) op(B) + beta * C0: A's element (i, k) of batch b at a[a_off[b] + i * a_rs + k * a_cs],
// likewise B's (k, j); C contiguous [batch, m, n]; C0 (optional) read at c0[i * c0_rs + j * c0_cs], the same in
// every batch. Batch offsets: the batch index decomposed over `batch` (strides 0: A, 1: B). float32 accumulation.
struct GemmShape {
  int64_t m, n, k;
  int64_t a_rs, a_cs, b_rs, b_cs;
  Indexing batch;
  float alpha = 1, beta = 0;
  const void* c0 = nullptr;
  int64_t c0_rs = 0, c0_cs = 0;
};
void gemm(DType t, const void* a, const void* b, void* c, const GemmShape& s, cudaStream_t stream);

enum class Reduce { kSum, kMean, kMax, kMin, kSumSquare, kL2 };
// out[o] = reduce of x over the reduced sub-space: output index o decomposed over `kept` (strides 0: x), each
// reduced element r over `reduced` (strides 0: x). float32 accumulation.
void reduce(Reduce op, DType t, const void* x, void* out, const Indexing& kept, const Indexing& reduced,
            cudaStream_t stream);
// Softmax (or LogSoftmax) along the middle dim of an [outer, cols, inner] array.
void softmax(DType t, bool log, const void* x, void* y, int64_t outer, int64_t cols, int64_t inner,
             cudaStream_t stream);

}  // namespace onnxtrain::kernels::cuda
