// Views of a tensor around one axis or a set of axes, shared by reductions,
// softmax, arg-reductions, TopK and CumSum.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace onnxtrain::ops {

// dims seen as (outer, n, inner) around `axis`.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisView axis_view(const std::vector<int64_t>& dims, int64_t axis);

// dims seen as (outer, n) after flattening at `axis` (softmax before opset 13).
AxisView flatten_view(const std::vector<int64_t>& dims, int64_t axis);

}  // namespace onnxtrain::ops
