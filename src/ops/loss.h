// Typed attributes of NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, read by their kernels, and of the
// fused head's com.onnxtrain.LinearGradAdd.
#pragma once
#include <cstdint>

#include "ir/graph.h"

namespace onnxtrain::ops {

struct LossAttrs {
  bool softmax;  // SoftmaxCrossEntropyLoss: a log-softmax over the classes first
  enum Reduction { kNone, kSum, kMean } reduction;
  int64_t ignore_index;
  bool has_ignore;
};

// A loss node's attributes: reduction (none, sum or mean, else a ModelError) and ignore_index; `softmax` for
// SoftmaxCrossEntropyLoss.
LossAttrs loss_attrs(const ir::Node& n);

// com.onnxtrain.LinearGradAdd: the gradient of which input of the head's product it adds to.
struct LinearGradAddAttrs {
  enum Wrt { kX, kW, kB } wrt;
};

}  // namespace onnxtrain::ops
