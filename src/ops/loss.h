// Typed attributes of NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, read by their kernels.
#pragma once
#include <cstdint>

namespace onnxtrain::ops {

struct LossAttrs {
  bool softmax;  // SoftmaxCrossEntropyLoss: a log-softmax over the classes first
  enum Reduction { kNone, kSum, kMean } reduction;
  int64_t ignore_index;
  bool has_ignore;
};

}  // namespace onnxtrain::ops
