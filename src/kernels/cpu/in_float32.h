// A float32 kernel that serves bfloat16 and float16 nodes too: their low-precision float inputs are converted to
// float32, the kernel runs on the copies into float32 outputs, which are rounded back. The copies live in the
// node's scratch, after the kernel's own, so the allocation plan counts them. For ops whose bf16 speed does not
// matter (convolution's col2im, pooling, resize, scans, einsum, losses); the hot ones compute in bf16 natively.
#pragma once
#include "kernels/kernel.h"

namespace onnxtrain::kernels {

// `bf16_native` (optional): when it holds (on this CPU), def's kernel takes bfloat16 nodes itself, without copies.
KernelDef in_float32(KernelDef def, bool (*bf16_native)() = nullptr);

}  // namespace onnxtrain::kernels
