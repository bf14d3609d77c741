#include "ops/axis_util.h"

namespace onnxtrain::ops {

AxisView axis_view(const std::vector<int64_t>& dims, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < int64_t(dims.size()); ++i) {
    if (i < axis) v.outer *= dims[size_t(i)];
    else if (i == axis) v.n = dims[size_t(i)];
    else v.inner *= dims[size_t(i)];
  }
  return v;
}

AxisView flatten_view(const std::vector<int64_t>& dims, int64_t axis) {
  AxisView v;
  v.n = 1;
  for (int64_t i = 0; i < int64_t(dims.size()); ++i) (i < axis ? v.outer : v.n) *= dims[size_t(i)];
  return v;
}

}  // namespace onnxtrain::ops
