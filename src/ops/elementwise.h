// Typed attributes of the elementwise ops (src/ops/elementwise_*.cpp), read by their kernels.
#pragma once

namespace onnxtrain::ops {

// Binary arithmetic: Mod's `fmod` (the others have none).
struct BinaryAttrs {
  bool fmod = false;
};

// Clip's bounds before opset 11 (later they are inputs).
struct ClipAttrs {
  float min, max;
};

// IsInf's directions.
struct IsInfAttrs {
  bool positive, negative;
};

// The activations' parameters (each op's defaults applied): LeakyRelu, Elu, Celu, ThresholdedRelu (alpha),
// Selu (alpha, gamma), HardSigmoid (alpha, beta), Gelu (tanh approximation or exact).
struct UnaryAttrs {
  float alpha = 0, beta = 0, gamma = 0;
  bool tanh_approx = false;
};

}  // namespace onnxtrain::ops
