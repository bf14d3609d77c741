// What a gradient rule sees: the forward node's inputs and outputs, the
// gradients flowing into its outputs, and a builder for backward nodes made of
// ordinary ops. The autodiff engine implements it (src/autodiff/), so rules live
// next to their ops without the op table knowing the engine.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "onnxtrain/error.h"

namespace onnxtrain::ops {

class GradCtx {
 public:
  virtual ~GradCtx() = default;
  virtual const ir::Node& node() const = 0;
  // Forward input i / output i (an omitted optional output is added to the node).
  virtual ir::Value* x(size_t i) = 0;
  virtual ir::Value* y(size_t i) = 0;
  // The gradient of output i, or nullptr when none flows into it.
  virtual ir::Value* dy(size_t i) = 0;
  // Whether input i needs a gradient.
  virtual bool needs(size_t i) const = 0;
  // Contributes the gradient of input i; the engine reduces broadcast dims and accumulates.
  virtual void set_dx(size_t i, ir::Value* g) = 0;
  // A backward node with `outputs` fresh outputs; returns them.
  virtual std::vector<ir::Value*> ops(const std::string& type, const std::vector<ir::Value*>& inputs, size_t outputs,
                                      ir::Attributes attrs = {}, const std::string& domain = "") = 0;
  // Constants: a scalar of dtype t, a 1-D int64 tensor.
  virtual ir::Value* scalar(double v, DType t) = 0;
  virtual ir::Value* ints(const std::vector<int64_t>& v) = 0;

  ir::Value* op(const std::string& type, const std::vector<ir::Value*>& inputs, ir::Attributes attrs = {}) {
    return ops(type, inputs, 1, std::move(attrs))[0];
  }
  ir::Value* add(ir::Value* a, ir::Value* b) { return op("Add", {a, b}); }
  ir::Value* sub(ir::Value* a, ir::Value* b) { return op("Sub", {a, b}); }
  ir::Value* mul(ir::Value* a, ir::Value* b) { return op("Mul", {a, b}); }
  ir::Value* div(ir::Value* a, ir::Value* b) { return op("Div", {a, b}); }
  ir::Value* neg(ir::Value* a) { return op("Neg", {a}); }
  ir::Value* exp(ir::Value* a) { return op("Exp", {a}); }
  ir::Value* log(ir::Value* a) { return op("Log", {a}); }
  ir::Value* sqrt(ir::Value* a) { return op("Sqrt", {a}); }
  ir::Value* reciprocal(ir::Value* a) { return op("Reciprocal", {a}); }
  ir::Value* sign(ir::Value* a) { return op("Sign", {a}); }
  ir::Value* tanh(ir::Value* a) { return op("Tanh", {a}); }
  ir::Value* sigmoid(ir::Value* a) { return op("Sigmoid", {a}); }
  ir::Value* greater(ir::Value* a, ir::Value* b) { return op("Greater", {a, b}); }
  ir::Value* less(ir::Value* a, ir::Value* b) { return op("Less", {a, b}); }
  ir::Value* equal(ir::Value* a, ir::Value* b) { return op("Equal", {a, b}); }
  ir::Value* logical_and(ir::Value* a, ir::Value* b) { return op("And", {a, b}); }
  ir::Value* logical_not(ir::Value* a) { return op("Not", {a}); }
  ir::Value* where(ir::Value* cond, ir::Value* a, ir::Value* b) { return op("Where", {cond, a, b}); }
  ir::Value* size(ir::Value* v) { return op("Size", {v}); }
  ir::Value* reshape(ir::Value* v, ir::Value* shape) { return op("Reshape", {v, shape}); }
  ir::Value* expand(ir::Value* v, ir::Value* shape) { return op("Expand", {v, shape}); }
  ir::Value* gather(ir::Value* v, ir::Value* index) { return op("Gather", {v, index}); }
  ir::Value* cast(ir::Value* v, DType to) { return op("Cast", {v}, {{"to", int64_t(to)}}); }
  ir::Value* unsqueeze(ir::Value* v, const std::vector<int64_t>& axes) { return op("Unsqueeze", {v, ints(axes)}); }
  ir::Value* reduce_sum(ir::Value* v, const std::vector<int64_t>& axes, bool keepdims) {
    return op("ReduceSum", {v, ints(axes)}, {{"keepdims", int64_t(keepdims)}});
  }
  ir::Value* reduce_mean(ir::Value* v, const std::vector<int64_t>& axes, bool keepdims) {
    return op("ReduceMean", {v, ints(axes)}, {{"keepdims", int64_t(keepdims)}});
  }
  ir::Value* concat(const std::vector<ir::Value*>& parts, int64_t axis) {
    return op("Concat", parts, {{"axis", axis}});
  }
  // v, which a gradient rule reads: a ShapeError naming the node when the model left that input empty.
  ir::Value* present(ir::Value* v) {
    if (!v) throw ShapeError(node().where() + ": its gradient needs an input the node leaves empty");
    return v;
  }
  // A scalar with the dtype of v.
  ir::Value* like(double c, ir::Value* v) { return scalar(c, present(v)->dtype); }
  ir::Value* shape(ir::Value* v) { return op("Shape", {v}); }
  ir::Value* zeros_like(ir::Value* v);
  // Zeros of x's shape with dy added at the flat element positions `index` (dy's shape).
  ir::Value* scatter_add_flat(ir::Value* x, ir::Value* index, ir::Value* dy);
  // MatMul(op(a), op(b)), op transposing the last two dims where ta / tb (com.onnxtrain.FusedMatMul).
  ir::Value* matmul(ir::Value* a, bool ta, ir::Value* b, bool tb) {
    return ops("FusedMatMul", {a, b}, 1, {{"transA", int64_t(ta)}, {"transB", int64_t(tb)}}, "com.onnxtrain")[0];
  }
  // `cond ? a : 0`, with a float mask kept as bool.
  ir::Value* where_or_zero(ir::Value* cond, ir::Value* a) { return op("Where", {cond, a, like(0, a)}); }
};

inline ir::Value* GradCtx::zeros_like(ir::Value* v) {
  Tensor zero = Tensor::zeros(present(v)->dtype, {1});
  return op("ConstantOfShape", {shape(v)}, {{"value", zero}});
}

inline ir::Value* GradCtx::scatter_add_flat(ir::Value* x, ir::Value* index, ir::Value* dy) {
  ir::Value* flat = ints({-1});
  ir::Value* zeros = op("ConstantOfShape", {op("Reshape", {op("Size", {present(x)}), ints({1})})},
                        {{"value", Tensor::zeros(x->dtype, {1})}});
  ir::Value* dx = op("ScatterElements", {zeros, op("Reshape", {index, flat}), op("Reshape", {dy, flat})},
                     {{"axis", int64_t(0)}, {"reduction", std::string("add")}});
  return op("Reshape", {dx, shape(x)});
}

}  // namespace onnxtrain::ops
