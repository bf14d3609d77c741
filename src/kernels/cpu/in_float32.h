// in_float32 (kernels/in_float32.h) on the host: the copies converted by the host's loops (kernels/cpu/convert.h).
#pragma once
#include "kernels/in_float32.h"

namespace onnxtrain::kernels {

KernelDef in_float32(KernelDef def, bool (*bf16_native)() = nullptr);
KernelDef in_float32(KernelDef def, bool (*takes_as_is)(ops::InferCtx&));

}  // namespace onnxtrain::kernels
