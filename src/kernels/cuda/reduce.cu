// Reductions and softmax on the GPU: one block per output element (or row), the block's partial results combined
// by CUB's block reduction, float32 accumulation.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/column_chunks.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename T>
__global__ void reduce_kernel(Reduce op, const T* x, T* out, Indexing kept, Indexing reduced, int64_t count) {
  __shared__ BlockReduce::TempStorage tmp;
  const int64_t base = offsets<1>(kept, blockIdx.x).at[0];
  const bool extreme = op == Reduce::kMax || op == Reduce::kMin;
  float acc = op == Reduce::kMax ? -INFINITY : op == Reduce::kMin ? INFINITY : 0.f;
  for (int64_t r = threadIdx.x; r < count; r += kThreads) {
    float v = to_float(x[base + offsets<1>(reduced, r).at[0]]);
    if (op == Reduce::kMax)
      acc = MaxOp()(acc, v);
    else if (op == Reduce::kMin)
      acc = MinOp()(acc, v);
    else
      acc += op == Reduce::kSumSquare || op == Reduce::kL2 ? v * v : v;
  }
  float total = op == Reduce::kMax   ? BlockReduce(tmp).Reduce(acc, MaxOp())
                : op == Reduce::kMin ? BlockReduce(tmp).Reduce(acc, MinOp())
                                     : BlockReduce(tmp).Reduce(acc, SumOp());
  if (threadIdx.x != 0) return;
  if (op == Reduce::kMean) total /= float(count);
  if (op == Reduce::kL2) total = sqrtf(total);
  if (extreme && count == 0) total = op == Reduce::kMax ? -INFINITY : INFINITY;
  out[blockIdx.x] = from_float<T>(total);
}

template <typename T>
__global__ void softmax_kernel(bool log, const T* x, T* y, int64_t cols, int64_t inner) {
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  // Row r's elements: at stride `inner` from (r / inner) * cols * inner + r % inner.
  const int64_t r = blockIdx.x, start = r / inner * cols * inner + r % inner;
  const T* xr = x + start;
  T* yr = y + start;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) m = fmaxf(m, to_float(xr[j * inner]));
  m = block_all_reduce(m, MaxOp(), tmp, &shared);
  float s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) s += expf(to_float(xr[j * inner]) - m);
  s = block_all_reduce(s, SumOp(), tmp, &shared);
  const float log_s = logf(s), inv_s = 1.f / s;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    float v = to_float(xr[j * inner]) - m;
    yr[j * inner] = from_float<T>(log ? v - log_s : expf(v) * inv_s);
  }
}

}  // namespace

void reduce(Reduce op, DType t, const void* x, void* out, const Indexing& kept, const Indexing& reduced,
            cudaStream_t stream) {
  const int64_t outputs = numel(kept), count = numel(reduced);
  if (outputs == 0) return;
  if (outputs > 0x7fffffff) launch_error("reduce: more than 2^31 outputs");
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    reduce_kernel<<<unsigned(outputs), kThreads, 0, stream>>>(op, static_cast<const T*>(x), static_cast<T*>(out), kept,
                                                              reduced, count);
  });
  if (!ok) unsupported_dtype("reduce", t);
  check_launch("reduce");
}

void column_reduce(DType t, const void* x, int64_t rows, int64_t n, float divisor, float* partial, void* out,
                   cudaStream_t stream) {
  if (n == 0) return;
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    const Chunks ch = chunks_of(rows);
    const T* xp = static_cast<const T*>(x);
    bool wide = false;  // (16-bit columns 16 bytes at a time where the rows are whole 16-byte words)
    if constexpr (sizeof(T) * kWideColumns == 16) {
      wide = n % kWideColumns == 0 && packs_align<T>(xp, kWideColumns);
      if (wide)
        column_partials_wide_kernel<<<wide_chunk_grid(n, ch), kThreads, 0, stream>>>(xp, partial, rows, n, ch.rows);
    }
    if (!wide) column_partials_kernel<<<chunk_grid(n, ch), kThreads, 0, stream>>>(xp, partial, rows, n, ch.rows);
    sum_chunks_kernel<<<blocks_for(n), kThreads, 0, stream>>>(partial, ch.count, n, divisor, static_cast<T*>(out));
  });
  if (!ok) unsupported_dtype("column_reduce", t);
  check_launch("column_reduce");
}

void softmax(DType t, bool log, const void* x, void* y, int64_t outer, int64_t cols, int64_t inner,
             cudaStream_t stream) {
  const int64_t rows = outer * inner;
  if (rows == 0 || cols == 0) return;
  if (rows > 0x7fffffff) launch_error("softmax: more than 2^31 rows");
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    softmax_kernel<<<unsigned(rows), kThreads, 0, stream>>>(log, static_cast<const T*>(x), static_cast<T*>(y), cols,
                                                             inner);
  });
  if (!ok) unsupported_dtype("softmax", t);
  check_launch("softmax");
}

}  // namespace onnxtrain::kernels::cuda
