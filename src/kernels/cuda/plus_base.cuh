// The norm gradients' base (ops/normalization.h: a gradient added to dX, dX written in its place where it dies
// there), for their dX kernels (layer_norm_kernels.cuh, rms_norm_kernels.cuh).
#pragma once
#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {

// v as T, plus element j of base's row where there is one: the sum rounded as an Add of v stored as T and the base
// would round it (__fadd_rn: not fused into the product that made v).
template <typename T>
__device__ __forceinline__ T plus_base(const T* base_row, int64_t j, float v) {
  return from_float<T>(base_row ? __fadd_rn(to_float(from_float<T>(v)), to_float(base_row[j])) : v);
}

}  // namespace onnxtrain::kernels::cuda
