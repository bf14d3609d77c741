// Dropout's typed attributes, read by its kernels.
#pragma once
#include <cstdint>

#include "onnxtrain/dtype.h"

namespace onnxtrain::ops {

class InferCtx;

struct DropoutAttrs {
  float ratio;   // before opset 12 (later an input)
  int64_t seed;  // the node's own seed, when has_seed; else the run's
  bool has_seed;
  bool legacy;  // opset < 12: the ratio attribute, no training-mode input
};

// The output's dtype of a Dropout or DropoutGrad of input dtype x with attribute `to` (0: none): x's, or a float32
// and a 16-bit float the one beside the other (dropout_fusion.cpp); else a ShapeError naming the node.
DType dropout_output_dtype(int64_t to, DType x, InferCtx& ctx);

}  // namespace onnxtrain::ops
