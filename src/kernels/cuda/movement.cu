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
  auto launch = [&](auto v) {
    using T = decltype(v);
    strided_copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src), static_cast<T*>(dst), ix,
                                                                n);
  };
  switch (elem_bytes) {
    case 1: launch(uint8_t{}); break;
    case 2: launch(uint16_t{}); break;
    case 4: launch(uint32_t{}); break;
    case 8: launch(uint64_t{}); break;
    default: launch_error("strided_copy: elements of " + std::to_string(elem_bytes) + " bytes");
  }
  check_launch("strided_copy");
}

}  // namespace onnxtrain::kernels::cuda
