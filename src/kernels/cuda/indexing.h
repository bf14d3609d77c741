// Host side of the CUDA kernels: launch.h's Indexing made from a shape and the strides of the arrays read or
// written at its coordinates, and the stream a kernel call queues on.
#pragma once
#include <initializer_list>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/runtime.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels::cuda {

// `dims` with each array's strides (as many as dims, 0 where broadcast); an UnsupportedError past kMaxRank dims.
Indexing indexing(const KernelCtx& c, const std::vector<int64_t>& dims,
                  std::initializer_list<std::vector<int64_t>> strides);

inline cudaStream_t stream() { return current_stream(); }

}  // namespace onnxtrain::kernels::cuda
