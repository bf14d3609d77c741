// The CUDA runtime as onnxtrain's kernels use it: errors as exceptions, the stream work is queued on, and whether
// a device is there at all. Device memory is registered with the caching allocator (core/allocator.h) for every
// CUDA device index on first use (runtime.cpp), from cudaMalloc or the source the embedder set through the
// device-neutral hooks runtime.cpp registers (kernels/device_runtime.h).
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "onnxtrain/dtype.h"

namespace onnxtrain::kernels::cuda {

// An UnsupportedError naming the kernel and the dtype; an Error for a launch the kernels cannot shape.
[[noreturn]] void unsupported_dtype(const char* kernel, DType t);
[[noreturn]] void launch_error(const std::string& what);

// Throws onnxtrain::Error "CUDA error in <what>: <the runtime's message>" unless e is cudaSuccess.
void check(cudaError_t e, const char* what);
// The launch that was just queued, checked (a bad configuration shows at once; a fault in the kernel later).
void check_launch(const char* what);
// The number of CUDA devices this process can use: 0 without a driver or a device.
int device_count();
// The stream this thread queues work on: the caller's (PyTorch's current stream), or the default stream.
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);


}  // namespace onnxtrain::kernels::cuda
