// Typed attributes of the pooling ops (MaxPool, AveragePool, com.onnxtrain.AveragePoolGrad), read by their kernels.
#pragma once
#include "ops/window.h"

namespace onnxtrain::ops {

struct PoolAttrs {
  bool max;  // MaxPool
  Window win;
  bool include_pad;    // count_include_pad: AveragePool's divisor counts the pads
  bool storage_order;  // MaxPool's indices column-major
};

}  // namespace onnxtrain::ops
