// Typed attributes of the indexing ops (Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot),
// read by their kernels.
#pragma once
#include <cstdint>

namespace onnxtrain::ops {

struct IndexAttrs {
  int64_t axis;                                                      // OneHot's default is -1, the others' 0
  enum class Reduction { kNone, kAdd, kMul, kMax, kMin } reduction;  // the scatters'
  int64_t batch_dims;                                                // GatherND's
};

}  // namespace onnxtrain::ops
