// A norm's output rows on the host, written as float32 or as bfloat16 (a norm of attribute `to`: autocast's bf16
// activation from the float32 residual stream, rounded once, with no float32 copy between).
#pragma once
#include <cstdint>

#include "onnxtrain/tensor.h"

namespace onnxtrain::ops {
class InferCtx;
}

namespace onnxtrain::kernels {

// Row `row` (n elements) of y, float32 or bfloat16: (x[j] - mean) * rstd * scale[j] (+ bias[j] where given) for
// j < n, each operation rounded in this order as the loop of one element at a time rounds it (sixteen at a time
// where the CPU has AVX-512, bit for bit alike).
void norm_output_row(const float* x, float mean, float rstd, const float* scale, const float* bias, Tensor& y,
                     int64_t row, int64_t n);

// Whether a norm node is the float32 one of a bfloat16 output 0 (the forward norms take such nodes as they are).
bool float32_with_a_bf16_output(ops::InferCtx& s);

}  // namespace onnxtrain::kernels
