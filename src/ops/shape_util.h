// Shape helpers shared by shape functions.
#pragma once
#include <vector>

#include "core/dim.h"
#include "ops/op.h"

namespace onnxtrain::ops {

// NumPy broadcast of symbolic shapes; fails through ctx when constants clash.
Shape broadcast_shapes(InferCtx& ctx, const Shape& a, const Shape& b);
// Concrete dims of a run-time tensor as a Shape.
Shape shape_of(const Tensor& t);
// The concrete dims of an output shape; fails when a dim is symbolic.
std::vector<int64_t> concrete(const ir::Node& node, const Shape& s);
// Elementwise ops: the output takes input 0's dtype and the broadcast of all inputs' shapes.
void infer_broadcast(InferCtx& ctx, DType out_dtype);

}  // namespace onnxtrain::ops
