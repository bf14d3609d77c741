// Typed attributes of Conv and com.onnxtrain.ConvGrad, read by their kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ops/window.h"

namespace onnxtrain::ops {

struct ConvAttrs {
  const ir::Node* node;  // strides, dilations and pads default by the kernel's rank, known from W
  int64_t group;
  // The window for a weight of dims (M, C/group, k...).
  Window window(const std::vector<int64_t>& w_dims) const;
};

}  // namespace onnxtrain::ops
