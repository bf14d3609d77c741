// Functions compiled for both the host and a CUDA device: marked ONNXTRAIN_HOST_DEVICE, they are plain inline
// functions to the host compiler and __host__ __device__ ones to nvcc.
#pragma once

#ifdef __CUDACC__
#define ONNXTRAIN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ONNXTRAIN_HOST_DEVICE inline
#endif
