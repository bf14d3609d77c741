// Typed attributes of CumSum and TopK, read by their kernels.
#pragma once
#include <cstdint>

namespace onnxtrain::ops {

struct CumSumAttrs {
  bool exclusive, reverse;
};

struct TopKAttrs {
  int64_t axis;
  bool largest;  // results are always sorted, which `sorted=0` allows
  int64_t k;     // the attribute before opset 10 (-1: input 1)
};

}  // namespace onnxtrain::ops
