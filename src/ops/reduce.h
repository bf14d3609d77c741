// Typed attributes of the reductions (ReduceSum, ...) and of ArgMax/ArgMin, read by their kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/op.h"

namespace onnxtrain::ops {

struct ReduceAttrs {
  enum class Kind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp } kind;
  bool keepdims, noop_empty;  // noop_with_empty_axes
  std::vector<int64_t> axes;  // the attribute (older opsets); later input 1
  bool has_axes_attr;
  // The reduced axes as a mask over the input's dims.
  std::vector<bool> mask(InferCtx& ctx) const;
};

struct ArgReduceAttrs {
  bool max;  // ArgMax
  int64_t axis;
  bool keepdims, last;  // select_last_index
};

}  // namespace onnxtrain::ops
