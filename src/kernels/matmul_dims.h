// The dims of a MatMul or FusedMatMul call as every device's kernel reads them (NumPy semantics: a 1-D operand
// made a matrix, leading dims broadcast as batches), checked.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/kernel.h"
#include "ops/matmul.h"

namespace onnxtrain::kernels {

struct MatMulDims {
  std::vector<int64_t> a, b;                     // the operands' dims, 1-D ones made matrices
  std::vector<int64_t> a_batch, b_batch, batch;  // their leading dims, and those broadcast
  int64_t m, n, k;
};
// A ShapeError naming the node when the inner dims or the batch dims do not agree.
MatMulDims matmul_dims(const ops::MatMulAttrs& at, const KernelCtx& c);

}  // namespace onnxtrain::kernels
