// Typed attributes of MatMul, com.onnxtrain.FusedMatMul and Gemm, read by their kernels.
#pragma once
#include <string>

namespace onnxtrain::ops {

// MatMul; FusedMatMul(A, B, transA, transB) = MatMul(op(A), op(B)), op transposing the last two dims.
struct MatMulAttrs {
  bool fused, ta, tb;
  // For error messages: the flags of a FusedMatMul.
  std::string flags() const {
    return fused ? " (transA " + std::to_string(int(ta)) + ", transB " + std::to_string(int(tb)) + ")" : "";
  }
};

struct GemmAttrs {
  float alpha, beta;
  bool ta, tb;
};

}  // namespace onnxtrain::ops
