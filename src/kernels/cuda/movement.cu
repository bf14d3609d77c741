// Data movement on the GPU: one strided copy serves Transpose, Expand, Slice, Concat's and Split's parts and
// Identity; Trilu keeps a triangle.
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename T>
__global__ void strided_copy_kernel(const T* src, T* dst, Indexing ix, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    Offsets<2> o = offsets<2>(ix, i);
    dst[o.at[0]] = src[o.at[1]];
  }
}

template <typename T>
__global__ void trilu_kernel(const T* x, T* y, int64_t rows, int64_t cols, int64_t k, bool upper, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    const int64_t j = i % cols, r = i / cols % rows;
    y[i] = (upper ? j - r >= k : j - r <= k) ? x[i] : T(0);
  }
}

}  // namespace

void trilu(int elem_bytes, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t k, bool upper,
           cudaStream_t stream) {
  const int64_t n = batch * rows * cols;
  if (n == 0) return;
  with_bytes(elem_bytes, "Trilu", [&](auto v) {
    using T = decltype(v);
    trilu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, k,
                                                         upper, n);
  });
  check_launch("Trilu");
}

void strided_copy(int elem_bytes, const void* src, void* dst, const Indexing& ix, cudaStream_t stream) {
  const int64_t n = numel(ix);
  if (n == 0) return;
  with_bytes(elem_bytes, "strided_copy", [&](auto v) {
    using T = decltype(v);
    strided_copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src), static_cast<T*>(dst), ix,
                                                                n);
  });
  check_launch("strided_copy");
}

}  // namespace onnxtrain::kernels::cuda
