// Tensors for the C++ tests of bfloat16 kernels: float32 values that bf16 holds exactly, converted to bf16 and back.
#pragma once
#include <random>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::bf16_tensors {

// A float32 tensor of normal values (standard deviation `scale`), each rounded to bf16.
Tensor random_exact(const std::vector<int64_t>& dims, std::mt19937& rng, float scale = 1);
// A float32 tensor as `dtype` (bf16, rounded; float32: itself); any other tensor, and an undefined one, itself.
Tensor as(DType dtype, const Tensor& t);
// The values of a float32 or bf16 tensor.
std::vector<float> floats(const Tensor& t);

}  // namespace onnxtrain::bf16_tensors
