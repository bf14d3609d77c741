// Conv (N-d, groups, dilations, strides, pads/auto_pad) as im2col + GEMM, and
// its gradient op com.onnxtrain.ConvGrad (dX by col2im, dW by GEMM, dB by sums):
// built from ordinary ops the gradient would need a transposed convolution and
// copies of X per kernel offset, so it gets its own kernel.
#include "ops/conv.h"

#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

class ConvBase : public OpWith<ConvAttrs> {
 public:
  explicit ConvBase(const ir::Node& n) : OpWith({&n, n.attr_int("group", 1)}) {}
};

class ConvOp : public ConvBase {
 public:
  using ConvBase::ConvBase;
  void infer(InferCtx& ctx) const override {
    const Shape &x = ctx.shape(0), &w = ctx.shape(1);
    if (x.size() < 3 || w.size() != x.size())
      ctx.fail("X " + shape_str(x) + " and W " + shape_str(w) + " must be (N, C, ...) and (M, C/group, ...)");
    Dim cin = w[1] * Dim(attrs.group);
    if (x[1].is_const() && cin.is_const() && x[1] != cin)
      ctx.fail("X has " + x[1].str() + " channels, W expects " + cin.str() + " (group " + std::to_string(attrs.group) +
               ")");
    std::vector<int64_t> wd;
    for (auto& d : w) {
      if (!d.is_const()) ctx.unknown("the kernel size");
      wd.push_back(d.value());
    }
    Shape out = {x[0], w[0]};
    auto sp = attrs.window(wd).out_sizes(Shape(x.begin() + 2, x.end()));
    out.insert(out.end(), sp.begin(), sp.end());
    ctx.set(0, ctx.dtype(0), out);
  }
  void grad(GradCtx& gc) const override {
    auto outs = gc.ops("ConvGrad", {gc.dy(0), gc.x(0), gc.x(1)}, 3, attrs.node->attrs, "com.onnxtrain");
    for (size_t i = 0; i < 3; ++i)
      if (gc.x(i)) gc.set_dx(i, outs[i]);
  }
};

// Inputs (dY, X, W); outputs (dX, dW, dB), each optional.
class ConvGradOp : public ConvBase {
 public:
  using ConvBase::ConvBase;
  void infer(InferCtx& ctx) const override {
    ctx.set(0, ctx.dtype(1), ctx.shape(1));
    ctx.set(1, ctx.dtype(2), ctx.shape(2));
    ctx.set(2, ctx.dtype(2), {ctx.shape(2)[0]});
  }
};
const bool kRegistered =
    register_ops({{"", "Conv", factory<ConvOp>()}, {"com.onnxtrain", "ConvGrad", factory<ConvGradOp>()}});

}  // namespace

Window ConvAttrs::window(const std::vector<int64_t>& w_dims) const {
  std::vector<int64_t> k(w_dims.begin() + 2, w_dims.end());
  return Window::from_node(*node, node->has_attr("kernel_shape") ? node->attr_ints("kernel_shape") : k);
}

}  // namespace onnxtrain::ops
