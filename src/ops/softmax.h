// Typed attributes of Softmax, LogSoftmax and Hardmax, read by their kernels.
#pragma once
#include <cstdint>

namespace onnxtrain::ops {

struct SoftmaxAttrs {
  enum Kind { kSoftmax, kLogSoftmax, kHardmax } kind = kSoftmax;
  bool flatten = false;  // opset < 13: over the trailing dims flattened at `axis`
  int64_t axis = -1;
};

}  // namespace onnxtrain::ops
