// MaxPool (with indices), AveragePool and its gradient, GlobalAveragePool, GlobalMaxPool.
#include "ops/pool.h"

#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

PoolAttrs pool_attrs(const ir::Node& n) {
  return {n.op_type == "MaxPool", Window::from_node(n), n.attr_int("count_include_pad", 0) != 0,
          n.attr_int("storage_order", 0) != 0};
}

class PoolOp : public OpWith<PoolAttrs> {
 public:
  explicit PoolOp(const ir::Node& n) : OpWith(pool_attrs(n)), node_(n) {}
  DType output_dtype(size_t i, const std::vector<DType>& in) const override { return i == 1 ? DType::kInt64 : in[0]; }
  // MaxPool: dy goes back to where each maximum was; AveragePool: each window's dy / its divisor to each of its
  // positions (com.onnxtrain.AveragePoolGrad, which reads x's shape only: x need not be stashed).
  void grad(GradCtx& g) const override {
    if (attrs.max && attrs.storage_order) no_gradient(g);
    if (attrs.max) return g.set_dx(0, g.scatter_add_flat(g.x(0), g.y(1), g.dy(0)));
    g.set_dx(0, g.ops("AveragePoolGrad", {g.dy(0), g.shape(g.x(0))}, 1, node_.attrs, "com.onnxtrain")[0]);
  }
  bool differentiable_output(size_t i) const override { return i == 0; }
  void infer(InferCtx& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.size() != attrs.win.kernel.size() + 2)
      ctx.fail("input " + shape_str(x) + " does not match a " + std::to_string(attrs.win.kernel.size()) + "-d kernel");
    Shape out = {x[0], x[1]};
    auto sp = attrs.win.out_sizes(Shape(x.begin() + 2, x.end()));
    out.insert(out.end(), sp.begin(), sp.end());
    ctx.set(0, ctx.dtype(0), out);
    ctx.set(1, DType::kInt64, out);
  }

 private:
  const ir::Node& node_;
};

// com.onnxtrain.AveragePoolGrad(dY, shape of X), AveragePool's attributes: dX, each window's dY divided by the
// window's divisor (as the forward counted it) added to each of the window's positions.
class AveragePoolGradOp : public OpWith<PoolAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  explicit AveragePoolGradOp(const ir::Node& n) : OpWith(pool_attrs(n)) {}
  void infer(InferCtx& ctx) const override {
    const std::vector<Dim>* v = ctx.value(1);
    if (!v) ctx.fail("the shape of X must be known when the graph is built");
    if (v->size() != attrs.win.kernel.size() + 2 || ctx.rank(0) != int64_t(v->size()))
      ctx.fail("dY " + shape_str(ctx.shape(0)) + " and X " + shape_str(Shape(v->begin(), v->end())) +
               " do not match a " + std::to_string(attrs.win.kernel.size()) + "-d kernel");
    ctx.set(0, ctx.dtype(0), Shape(v->begin(), v->end()));
  }
};

class GlobalPoolOp : public Op {
 public:
  explicit GlobalPoolOp(const ir::Node& n) : max_(n.op_type == "GlobalMaxPool") {}
  void grad(GradCtx& g) const override {
    ir::Value *x = g.x(0), *y = g.y(0);
    ir::Value* full = g.expand(g.dy(0), g.shape(x));
    if (max_) return g.set_dx(0, g.where_or_zero(g.equal(x, y), full));
    ir::Value* count = g.div(g.cast(g.size(x), x->dtype), g.cast(g.size(y), x->dtype));
    g.set_dx(0, g.div(full, count));
  }
  void infer(InferCtx& ctx) const override {
    Shape out = ctx.shape(0);
    if (out.size() < 2) ctx.fail("input must be (N, C, ...), got " + shape_str(out));
    for (size_t i = 2; i < out.size(); ++i) out[i] = Dim(1);
    ctx.set(0, ctx.dtype(0), out);
  }

 private:
  bool max_;  // GlobalMaxPool
};
const bool kRegistered = register_ops({
    {"", "MaxPool", factory<PoolOp>()},
    {"", "AveragePool", factory<PoolOp>()},
    {"com.onnxtrain", "AveragePoolGrad", factory<AveragePoolGradOp>()},
    {"", "GlobalAveragePool", factory<GlobalPoolOp>()},
    {"", "GlobalMaxPool", factory<GlobalPoolOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
