// Data movement on the GPU: one strided copy serves Transpose, Expand, Slice, Concat's parts and Identity.
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

}  // namespace

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
