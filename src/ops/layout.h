// Typed attributes of the layout ops (Transpose, Concat, Split, Slice, Pad, Trilu), read by their kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dim.h"
#include "ops/op.h"

namespace onnxtrain::ops {

struct TransposeAttrs {
  std::vector<int64_t> perm;  // empty: reversed
  std::vector<int64_t> resolved(int64_t rank) const;
};

// Concat's axis.
struct AxisAttrs {
  int64_t axis;
};

struct SplitAttrs {
  int64_t axis;
  std::vector<int64_t> split;  // empty: the sizes input, or as many equal parts as outputs
};

// Slice: starts/ends/axes/steps from attributes (before opset 10) or inputs.
struct SliceAttrs {
  std::vector<int64_t> starts, ends, axes;
  bool from_attrs;
  // Per input dim: the first element, the output size and the step.
  struct Plan {
    std::vector<Dim> start, size;
    std::vector<int64_t> step;
  };
  // `in`: the sliced data's shape; starts, ends, axes and steps are inputs first.. of the node.
  Plan plan(InferCtx& ctx, const Shape& in, size_t first) const;
};

struct PadAttrs {
  enum class Mode { kConstant, kReflect, kEdge, kWrap } mode;
  std::vector<int64_t> pads;  // the attribute (before opset 11); later input 1
  float value;                // the constant before opset 11; later input 2
  bool from_attr;
  // Pads of every dim (begins, then ends), with input 3's axes expanded.
  std::vector<Dim> resolved(InferCtx& ctx) const;
};

struct TriluAttrs {
  bool upper;
};

}  // namespace onnxtrain::ops
