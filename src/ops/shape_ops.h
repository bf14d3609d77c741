// Typed attributes of Shape, Constant and ConstantOfShape, read by their kernels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>

#include "onnxtrain/tensor.h"

namespace onnxtrain::ops {

struct ShapeAttrs {
  int64_t start, end;
  // The dims [first, second) of a rank-r input that Shape returns.
  std::pair<int64_t, int64_t> range(int64_t r) const {
    return {std::clamp(start < 0 ? start + r : start, int64_t(0), r),
            std::clamp(end < 0 ? end + r : end, int64_t(0), r)};
  }
};

// Constant's value; ConstantOfShape's one-element fill value.
struct ValueAttrs {
  Tensor value;
};

}  // namespace onnxtrain::ops
