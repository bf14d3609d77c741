// Typed attributes of ONNX's training optimizers (Momentum, Adagrad, Adam), read by their kernels.
#pragma once
#include <cstddef>

namespace onnxtrain::ops {

struct OptimizerAttrs {
  int groups;          // tensors per updated parameter: X, G and the states (3, Adam 4)
  double alpha, beta;  // Momentum's and Adam's coefficients
  double l2;           // norm_coefficient
  double epsilon;      // Adagrad, Adam
  double decay;        // Adagrad's decay_factor
  double post;         // Adam's norm_coefficient_post
  bool nesterov;       // Momentum's mode
  // The number of parameters a node with `inputs` inputs updates.
  size_t count(size_t inputs) const { return (inputs - 2) / size_t(groups); }
};

}  // namespace onnxtrain::ops
