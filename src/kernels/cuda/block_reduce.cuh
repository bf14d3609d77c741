// Block-wide float32 reductions for the .cu files: CUB's block reduction over kThreads threads, the operators, and
// the result handed to every thread of the block.
#pragma once
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {

using BlockReduce = cub::BlockReduce<float, kThreads>;

// Max and Min keep a NaN, as the CPU's reductions do.
struct MaxOp {
  __device__ float operator()(float a, float b) const { return a != a ? a : b != b ? b : fmaxf(a, b); }
};
struct MinOp {
  __device__ float operator()(float a, float b) const { return a != a ? a : b != b ? b : fminf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// The reduction by op of every thread's v, in every thread; tmp and shared are free again when it returns.
template <typename Op>
__device__ float block_all_reduce(float v, Op op, BlockReduce::TempStorage& tmp, float* shared) {
  float r = BlockReduce(tmp).Reduce(v, op);
  if (threadIdx.x == 0) *shared = r;
  __syncthreads();
  r = *shared;
  __syncthreads();
  return r;
}

}  // namespace onnxtrain::kernels::cuda
