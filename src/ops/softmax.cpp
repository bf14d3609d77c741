// Softmax, LogSoftmax (and Hardmax): along one axis from opset 13, over the
// flattened trailing dims before it.
#include "ops/softmax.h"

#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

SoftmaxAttrs softmax_attrs(const ir::Node& n) {
  SoftmaxAttrs a;
  a.kind = n.op_type == "Softmax"      ? SoftmaxAttrs::kSoftmax
           : n.op_type == "LogSoftmax" ? SoftmaxAttrs::kLogSoftmax
                                       : SoftmaxAttrs::kHardmax;
  a.flatten = n.opset > 0 && n.opset < 13;
  a.axis = n.attr_int("axis", a.flatten ? 1 : -1);
  return a;
}

class SoftmaxOp : public OpWith<SoftmaxAttrs> {
 public:
  explicit SoftmaxOp(const ir::Node& n) : OpWith(softmax_attrs(n)) {}
  void infer(InferCtx& ctx) const override {
    ctx.axis(attrs.axis, ctx.rank(0));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
  }
  int inplace_input() const override { return 0; }
  bool recomputable() const override { return true; }
  void grad(GradCtx& g) const override {
    ir::Value *y = g.y(0), *dy = g.dy(0);
    int64_t r = int64_t(y->shape.size()), a = attrs.axis < 0 ? attrs.axis + r : attrs.axis;
    if (attrs.kind == SoftmaxAttrs::kHardmax || (attrs.flatten && a != r - 1)) no_gradient(g);
    ir::Value* axes = g.ints({a});
    ir::Attributes keep = {{"keepdims", int64_t(1)}};
    if (attrs.kind == SoftmaxAttrs::kSoftmax)  // y (dy - sum(dy y))
      g.set_dx(0, g.mul(y, g.sub(dy, g.op("ReduceSum", {g.mul(dy, y), axes}, keep))));
    else  // dy - exp(y) sum(dy)
      g.set_dx(0, g.sub(dy, g.mul(g.exp(y), g.op("ReduceSum", {dy, axes}, keep))));
  }
};
const bool kRegistered = register_ops({{"", "Softmax", factory<SoftmaxOp>()},
                                       {"", "LogSoftmax", factory<SoftmaxOp>()},
                                       {"", "Hardmax", factory<SoftmaxOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
