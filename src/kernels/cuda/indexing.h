// Host side of the CUDA kernels: launch.h's Indexing made from a shape and the strides of the arrays read or
// written at its coordinates, the stream a kernel call queues on, and device copies and fills on it.
#pragma once
#include <initializer_list>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/runtime.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels::cuda {

// `dims` with each array's strides (as many as dims, 0 where broadcast), coalesced; an UnsupportedError past
// kMaxRank dims.
Indexing indexing(const KernelCtx& c, const std::vector<int64_t>& dims,
                  std::initializer_list<std::vector<int64_t>> strides);

// ix with its dims of size 1 dropped and each two adjacent dims merged into one where every array steps over them
// as over one (the outer dim's strides the inner's times its size): each flat index has the same offsets, found with
// fewer divisions (none for arrays of one shape, one for a row broadcast down a matrix).
Indexing coalesced(const Indexing& ix);

inline cudaStream_t stream() { return current_stream(); }

// Inputs first to last (those given) in x's dtype, else an UnsupportedError naming the node.
void same_dtype(const KernelCtx& c, const Tensor& x, size_t first, size_t last);

// `to` = `from` (same bytes, both on this device; nothing when they share a buffer), `bytes` of them between two
// buffers of this device, and `bytes` zeros at `dst`, queued on stream().
void copy(const Tensor& from, Tensor& to);
void copy_bytes(const void* from, void* to, size_t bytes);
void zero(void* dst, size_t bytes);

}  // namespace onnxtrain::kernels::cuda
