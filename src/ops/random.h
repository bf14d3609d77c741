// The random ops' typed attributes (RandomUniform[Like], RandomNormal[Like], Bernoulli), read by their kernels.
#pragma once
#include <cstdint>

#include "onnxtrain/dtype.h"

namespace onnxtrain::ops {

struct RandomAttrs {
  enum Kind { kUniform, kNormal, kBernoulli } kind;
  float a, b;  // uniform: low and high; normal: mean and scale (unused by Bernoulli)
  int64_t seed;  // the node's own seed, when has_seed; else the run's (as Dropout draws)
  bool has_seed;
  DType dtype;  // the output's (undefined: the input's)
};

}  // namespace onnxtrain::ops
