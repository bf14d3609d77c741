// A float32 kernel that serves bfloat16 and float16 nodes too, on any device: their low-precision float inputs are
// converted to float32, the kernel runs on the copies into float32 outputs, which are rounded back. The copies live
// in the node's scratch, after the kernel's own, so the allocation plan counts them. For ops whose 16-bit speed does
// not matter (on the host: convolution's col2im, pooling, resize, scans, einsum, losses); the hot ones compute in
// 16 bits natively.
#pragma once
#include "kernels/kernel.h"

namespace onnxtrain::kernels {

// Converts n elements from one float dtype to another (float32 to or from bfloat16 or float16) on the kernel's
// device, as the device's kernels queue work.
using ConvertFn = void (*)(DType from, DType to, const void* x, void* y, int64_t n);

// `bf16_native` (optional): when it holds (on this machine), def's kernel takes bfloat16 nodes itself, without copies.
KernelDef in_float32(KernelDef def, ConvertFn convert, bool (*bf16_native)() = nullptr);
// `takes_as_is`: the nodes def's kernel takes as they are, without copies (16-bit values and all).
KernelDef in_float32(KernelDef def, ConvertFn convert, bool (*takes_as_is)(ops::InferCtx&));

}  // namespace onnxtrain::kernels
