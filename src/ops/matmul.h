// Typed attributes of MatMul, com.onnxtrain.FusedMatMul, Gemm and com.onnxtrain.Linear, read by their kernels.
#pragma once
#include <string>

#include "ir/graph.h"
#include "onnxtrain/dtype.h"

namespace onnxtrain::ops {

// MatMul; FusedMatMul(A, B, transA, transB) = MatMul(op(A), op(B)), op transposing the last two dims.
struct MatMulAttrs {
  bool fused, ta, tb;
  DType to;  // FusedMatMul: product_output_dtype
  // For error messages: the flags of a FusedMatMul.
  std::string flags() const {
    return fused ? " (transA " + std::to_string(int(ta)) + ", transB " + std::to_string(int(tb)) + ")" : "";
  }
};

// com.onnxtrain.Linear(X, W, B?) = X W^T + B.
struct LinearAttrs {
  DType to;  // product_output_dtype
};

// The output dtype attribute `to` of com.onnxtrain.Linear and FusedMatMul: float32 from 16-bit float inputs (the
// cast_into_product pass sets it: the GEMM accumulates in float32 and writes it unrounded), else kUndefined (the
// inputs' dtype). Another value is a ModelError naming the node.
DType product_output_dtype(const ir::Node& n);

class InferCtx;
// The product's output dtype in a shape function: `to` when set (checking the inputs are 16-bit), else input 0's.
DType product_dtype(InferCtx& ctx, DType to);
// The same without the check (Op::output_dtype): `to` when set, else the inputs' dtype `in`.
inline DType product_dtype(DType to, DType in) { return to != DType::kUndefined ? to : in; }

struct GemmAttrs {
  float alpha, beta;
  bool ta, tb;
};

}  // namespace onnxtrain::ops
