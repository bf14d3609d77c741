// in_float32 (kernels/in_float32.h) on the host: the copies converted by the host's loops (kernels/cpu/convert.h).
#pragma once
#include "kernels/in_float32.h"

namespace onnxtrain::kernels {

KernelDef in_float32(KernelDef def, bool (*bf16_native)() = nullptr);
KernelDef in_float32(KernelDef def, bool (*takes_as_is)(ops::InferCtx&));

// Whether every value of a node is float32 but for input `input` and output `output` (-1: none), bfloat16: the
// mixed nodes autocast makes, which some kernels take as they are.
bool float32_but_one_bf16(ops::InferCtx& s, int input, int output);

}  // namespace onnxtrain::kernels
