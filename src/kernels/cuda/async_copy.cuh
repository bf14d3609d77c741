// Copies from global into shared memory that run while the thread goes on (PTX's cp.async, sm_80 on): 16 bytes a
// copy, of which the first `bytes` are read and the rest zero-filled. The copies a thread issued since its last
// commit_copies() form a group; wait_copies<N>() returns once at most N of its groups are still in flight, their
// bytes then in shared memory for it (a __syncthreads after makes them the block's). Compiled for the host, the
// tests' warp emulation defines them: a copy lands only when a wait covers its group, so that a read before its
// wait sees the old bytes, as it may on a GPU.
#pragma once
#include <cstdint>

#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {

#ifdef __CUDACC__
__device__ __forceinline__ void copy16_async(void* shared, const void* global, int bytes) {
  const unsigned at = unsigned(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(at), "l"(global), "r"(bytes));
}

__device__ __forceinline__ void copy16_async(void* shared, const void* global) {  // all 16 bytes read
  const unsigned at = unsigned(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(at), "l"(global));
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;"); }

template <int N>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}
#else
void copy16_async(void* shared, const void* global, int bytes);
inline void copy16_async(void* shared, const void* global) { copy16_async(shared, global, 16); }
void commit_copies();
void wait_copies(int in_flight);
template <int N>
void wait_copies() {
  wait_copies(N);
}
#endif

}  // namespace onnxtrain::kernels::cuda
