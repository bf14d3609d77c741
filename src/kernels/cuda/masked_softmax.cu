// Attention's masked softmax and its gradient on the GPU: a block per row, its maximum and sums by CUB's block
// reduction in float32 (as reduce.cu's softmax), the mask read with strides.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename T>
__global__ void masked_softmax_kernel(const T* x, const bool* cond, Indexing rows, int64_t cond_col, int64_t n,
                                      const T* scale_p, const T* fill_p, T* y) {
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * n;
  T* yr = y + r * n;
  const bool* cr = cond + offsets<1>(rows, r).at[0];
  const float scale = to_float(*scale_p), fill = to_float(*fill_p);
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += kThreads)
    m = fmaxf(m, cr[j * cond_col] ? fill : to_float(xr[j]) * scale);
  m = block_all_reduce(m, MaxOp(), tmp, &shared);
  float s = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads)
    s += expf((cr[j * cond_col] ? fill : to_float(xr[j]) * scale) - m);
  const float inv = 1.f / block_all_reduce(s, SumOp(), tmp, &shared);
  for (int64_t j = threadIdx.x; j < n; j += kThreads)  // (each thread reads its elements before writing them)
    yr[j] = from_float<T>(expf((cr[j * cond_col] ? fill : to_float(xr[j]) * scale) - m) * inv);
}

template <typename T>
__global__ void masked_softmax_grad_kernel(const T* dy, const T* y, const bool* cond, Indexing rows, int64_t cond_col,
                                           int64_t n, const T* scale_p, T* dx) {
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  const int64_t r = blockIdx.x;
  const T *dr = dy + r * n, *yr = y + r * n;
  const bool* cr = cond + offsets<1>(rows, r).at[0];
  float dot = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) dot += to_float(dr[j]) * to_float(yr[j]);
  dot = block_all_reduce(dot, SumOp(), tmp, &shared);
  const float scale = to_float(*scale_p);
  T* o = dx + r * n;
  for (int64_t j = threadIdx.x; j < n; j += kThreads)
    o[j] = from_float<T>(cr[j * cond_col] ? 0.f : to_float(yr[j]) * (to_float(dr[j]) - dot) * scale);
}

unsigned row_blocks(const Indexing& rows, const char* kernel) {
  const int64_t n = numel(rows);
  if (n > 0x7fffffff) launch_error(std::string(kernel) + ": more than 2^31 rows");
  return unsigned(n);
}

}  // namespace

void masked_softmax(DType t, const void* x, const bool* cond, const Indexing& rows, int64_t cond_col, int64_t n,
                    const void* scale, const void* fill, void* y, cudaStream_t stream) {
  const unsigned blocks = row_blocks(rows, "MaskedSoftmax");
  if (blocks == 0 || n == 0) return;
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    masked_softmax_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), cond, rows, cond_col, n,
                                                           static_cast<const T*>(scale), static_cast<const T*>(fill),
                                                           static_cast<T*>(y));
  });
  if (!ok) unsupported_dtype("MaskedSoftmax", t);
  check_launch("MaskedSoftmax");
}

void masked_softmax_grad(DType t, const void* dy, const void* y, const bool* cond, const Indexing& rows,
                         int64_t cond_col, int64_t n, const void* scale, void* dx, cudaStream_t stream) {
  const unsigned blocks = row_blocks(rows, "MaskedSoftmaxGrad");
  if (blocks == 0 || n == 0) return;
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    masked_softmax_grad_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(dy), static_cast<const T*>(y),
                                                                cond, rows, cond_col, n, static_cast<const T*>(scale),
                                                                static_cast<T*>(dx));
  });
  if (!ok) unsupported_dtype("MaskedSoftmaxGrad", t);
  check_launch("MaskedSoftmaxGrad");
}

}  // namespace onnxtrain::kernels::cuda
