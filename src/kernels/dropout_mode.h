// Whether a Dropout (or its gradient) drops, as every device's kernel reads it: the ratio in training mode (input
// 2 true, never before opset 12; input 1, 0.5 when omitted), read on the host, or nullopt for the identity.
#pragma once
#include <optional>

#include "kernels/kernel.h"
#include "ops/dropout.h"

namespace onnxtrain::kernels {

// A ShapeError naming the node for a ratio outside [0, 1).
std::optional<float> dropout_training_ratio(const ops::DropoutAttrs& a, const KernelCtx& c);

// One call of Dropout or DropoutGrad as every device's kernel takes it: whether it drops (training with a ratio over
// 0), the seed (the node's, else the run's), the threshold of the draw and the kept elements' scale; where it drops
// nothing, threshold 0 and scale 1 (a mask keeping all: a conversion, a residual's sum). `residual`, where given,
// must hold as many elements as input 0 (else a ShapeError naming the node).
struct DropoutCall {
  bool drops;
  uint64_t seed;
  uint32_t threshold;
  double scale;
};
DropoutCall dropout_call(const ops::DropoutAttrs& a, const KernelCtx& c, const Tensor* residual);

}  // namespace onnxtrain::kernels
