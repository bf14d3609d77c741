// A custom torch.autograd.Function called from the graph at its place:
//   com.onnxtrain.PythonOp(X_0, ..., X_m-1) -> (Y_0, ..., Y_k-1, context)
// runs the Function's forward in PyTorch (attributes: key, naming it and its non-tensor arguments; output_like,
// the input whose shape each Y has; output_dtypes), and
//   com.onnxtrain.PythonOpGrad(context, dY_0, ..., dY_k-1, shape(X_0), ..., shape(X_m-1)) -> (dX_0, ..., dX_m-1)
// its backward, from what the forward kept (the context: a handle on PyTorch's own autograd graph of the call,
// released with the last tensor holding it). What the Function saves lives in PyTorch, outside the allocation
// plan; neither op is recomputable, so no recompute plan crosses one.
#include "ops/python_op.h"

#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

class PythonOp : public OpWith<PythonOpAttrs> {
 public:
  explicit PythonOp(const ir::Node& n)
      : OpWith(PythonOpAttrs{n.attr_string("key", "")}),
        like_(n.attr_ints("output_like")),
        dtypes_(n.attr_ints("output_dtypes")) {
    if (attrs.key.empty() || like_.size() != dtypes_.size() || n.outputs.size() != like_.size() + 1)
      throw ModelError(n.where() + ": a PythonOp needs a key, and an output_like and output_dtypes entry per output "
                       "but the last (its context)");
  }
  bool differentiable_output(size_t i) const override { return i < like_.size(); }
  DType output_dtype(size_t i, const std::vector<DType>&) const override {
    return i < dtypes_.size() ? dtype_from_onnx(int32_t(dtypes_[i])) : DType::kInt64;
  }
  void infer(InferCtx& ctx) const override {
    for (size_t i = 0; i < like_.size(); ++i) {
      const DType t = dtype_from_onnx(int32_t(dtypes_[i]));
      if (like_[i] < 0 || like_[i] >= int64_t(ctx.num_inputs()) || t == DType::kUndefined)
        ctx.fail("output " + std::to_string(i) + " has no input to take its shape from, or no dtype");
      ctx.set(i, t, ctx.shape(size_t(like_[i])));
    }
    ctx.set(like_.size(), DType::kInt64, {});
  }
  void grad(GradCtx& g) const override {
    const ir::Node& n = g.node();
    std::vector<ir::Value*> ins = {g.y(like_.size())};
    for (size_t i = 0; i < like_.size(); ++i) ins.push_back(g.dy(i));
    for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(g.op("Shape", {g.x(i)}));
    ir::Attributes a = {{"key", attrs.key}, {"outputs", int64_t(like_.size())}};
    std::vector<int64_t> dtypes;
    for (const ir::Value* x : n.inputs) dtypes.push_back(int64_t(x->dtype));
    a["input_dtypes"] = dtypes;
    std::vector<ir::Value*> dx = g.ops("PythonOpGrad", ins, n.inputs.size(), a, "com.onnxtrain");
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (g.needs(i) && dtype_is_float(n.inputs[i]->dtype)) g.set_dx(i, dx[i]);
  }

 private:
  std::vector<int64_t> like_, dtypes_;
};

class PythonOpGrad : public OpWith<PythonOpAttrs> {
 public:
  explicit PythonOpGrad(const ir::Node& n)
      : OpWith(PythonOpAttrs{n.attr_string("key", "")}),
        outputs_(size_t(n.attr_int("outputs", 0))),
        dtypes_(n.attr_ints("input_dtypes")) {}
  uint64_t host_inputs() const override {  // the forward inputs' shapes
    uint64_t r = 0;
    for (size_t i = 0; i < dtypes_.size(); ++i) r |= uint64_t(1) << (1 + outputs_ + i);
    return r;
  }
  bool input_may_be_unset(size_t i) const override { return i >= 1 && i <= outputs_; }  // (read as zeros)
  bool differentiable_output(size_t) const override { return false; }
  DType output_dtype(size_t i, const std::vector<DType>&) const override {
    return dtype_from_onnx(int32_t(dtypes_.at(i)));
  }
  void infer(InferCtx& ctx) const override {
    if (ctx.num_inputs() != 1 + outputs_ + dtypes_.size())
      ctx.fail("takes the context, a gradient per output and a shape per forward input");
    for (size_t i = 0; i < dtypes_.size(); ++i) {
      const std::vector<Dim>* shape = ctx.value(1 + outputs_ + i);
      if (!shape) ctx.unknown("the shape of forward input " + std::to_string(i));
      ctx.set(i, dtype_from_onnx(int32_t(dtypes_[i])), *shape);
    }
  }

 private:
  size_t outputs_;
  std::vector<int64_t> dtypes_;
};

const bool kRegistered = register_ops({{"com.onnxtrain", "PythonOp", factory<PythonOp>()},
                                       {"com.onnxtrain", "PythonOpGrad", factory<PythonOpGrad>()}});

}  // namespace
}  // namespace onnxtrain::ops
