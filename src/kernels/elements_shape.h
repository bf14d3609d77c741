// GatherElements' and ScatterElements' shape rule, for every device's kernels: the indices have the data's rank and,
// off the axis, no larger dims (a ShapeError naming the node otherwise).
#pragma once
#include <string>

#include "kernels/kernel.h"

namespace onnxtrain::kernels {

inline void check_elements_shape(const KernelCtx& c, const Tensor& idx, const Tensor& x, int64_t axis) {
  bool fits = idx.rank() == x.rank() && axis >= 0 && axis < x.rank();
  for (int64_t d = 0; fits && d < x.rank(); ++d) fits = d == axis || idx.dims()[size_t(d)] <= x.dims()[size_t(d)];
  if (!fits)
    c.fail("indices " + dims_str(idx.dims()) + " do not fit data " + dims_str(x.dims()) + " along axis " +
           std::to_string(axis));
}

}  // namespace onnxtrain::kernels
