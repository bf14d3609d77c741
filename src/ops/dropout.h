// Dropout's typed attributes, read by its kernels.
#pragma once
#include <cstdint>

namespace onnxtrain::ops {

struct DropoutAttrs {
  float ratio;   // before opset 12 (later an input)
  int64_t seed;  // the node's own seed, when has_seed; else the run's
  bool has_seed;
  bool legacy;  // opset < 12: the ratio attribute, no training-mode input
};

}  // namespace onnxtrain::ops
