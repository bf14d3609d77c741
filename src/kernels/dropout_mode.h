// Whether a Dropout (or its gradient) drops, as every device's kernel reads it: the ratio in training mode (input
// 2 true, never before opset 12; input 1, 0.5 when omitted), read on the host, or nullopt for the identity.
#pragma once
#include <optional>

#include "kernels/kernel.h"
#include "ops/dropout.h"

namespace onnxtrain::kernels {

// A ShapeError naming the node for a ratio outside [0, 1).
std::optional<float> dropout_training_ratio(const ops::DropoutAttrs& a, const KernelCtx& c);

}  // namespace onnxtrain::kernels
