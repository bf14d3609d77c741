// Reductions over a set of axes (ReduceSum, ReduceMean, ...) and over one axis
// (ArgMax, ArgMin). Axes come from an attribute or, in newer opsets, input 1.
#include "ops/reduce.h"

#include <map>

#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

ReduceAttrs::Kind reduce_kind(const std::string& op) {
  using K = ReduceAttrs::Kind;
  static const std::map<std::string, K> kinds = {{"ReduceSum", K::kSum},       {"ReduceMean", K::kMean},
                                                 {"ReduceMax", K::kMax},       {"ReduceMin", K::kMin},
                                                 {"ReduceProd", K::kProd},     {"ReduceL1", K::kL1},
                                                 {"ReduceL2", K::kL2},         {"ReduceSumSquare", K::kSumSquare},
                                                 {"ReduceLogSum", K::kLogSum}, {"ReduceLogSumExp", K::kLogSumExp}};
  return kinds.at(op);
}

class ReduceOp : public OpWith<ReduceAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  explicit ReduceOp(const ir::Node& n)
      : OpWith({reduce_kind(n.op_type), n.attr_int("keepdims", 1) != 0, n.attr_int("noop_with_empty_axes", 0) != 0,
                n.attr_ints("axes"), n.has_attr("axes")}) {}
  bool recomputable() const override { return true; }
  void grad(GradCtx& g) const override;
  void infer(InferCtx& ctx) const override {
    auto m = attrs.mask(ctx);
    Shape out;
    for (size_t i = 0; i < m.size(); ++i) {
      if (!m[i])
        out.push_back(ctx.shape(0)[i]);
      else if (attrs.keepdims)
        out.push_back(Dim(1));
    }
    ctx.set(0, ctx.dtype(0), out);
  }
};
using ir::Value;

void ReduceOp::grad(GradCtx& g) const {
  Value *x = g.x(0), *y = g.y(0), *dy = g.dy(0);
  int64_t r = int64_t(x->shape.size());
  std::vector<int64_t> axes = attrs.axes;
  if (!attrs.has_axes_attr && g.x(1)) {
    const auto& v = g.x(1)->sym_value;
    if (!v) no_gradient(g);
    for (auto& d : *v) {
      if (!d.is_const()) no_gradient(g);
      axes.push_back(d.value() < 0 ? d.value() + r : d.value());
    }
  }
  if (axes.empty() && !attrs.noop_empty)
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (auto& a : axes) a = a < 0 ? a + r : a;
  // dy and y with the reduced dims kept, then broadcast back over x.
  Value* dyk = attrs.keepdims || axes.empty() ? dy : g.unsqueeze(dy, axes);
  Value* yk = attrs.keepdims || axes.empty() ? y : g.unsqueeze(y, axes);
  Value* full = g.expand(dyk, g.shape(x));
  using K = ReduceAttrs::Kind;
  switch (attrs.kind) {
    case K::kSum:
      return g.set_dx(0, full);
    case K::kMean: {
      Value* count = g.div(g.cast(g.size(x), x->dtype), g.cast(g.size(y), x->dtype));
      return g.set_dx(0, g.div(full, count));
    }
    case K::kMax:
    case K::kMin:
      return g.set_dx(0, g.where_or_zero(g.equal(x, yk), full));
    case K::kProd:
      return g.set_dx(0, g.div(g.mul(full, yk), x));
    case K::kL1:
      return g.set_dx(0, g.mul(full, g.sign(x)));
    case K::kL2:
      return g.set_dx(0, g.div(g.mul(full, x), yk));
    case K::kSumSquare:
      return g.set_dx(0, g.mul(full, g.mul(g.like(2, x), x)));
    case K::kLogSum:
      return g.set_dx(0, g.div(full, g.exp(yk)));
    case K::kLogSumExp:
      return g.set_dx(0, g.mul(full, g.exp(g.sub(x, yk))));
  }
}

class ArgReduceOp : public OpWith<ArgReduceAttrs> {
 public:
  explicit ArgReduceOp(const ir::Node& n)
      : OpWith({n.op_type == "ArgMax", n.attr_int("axis", 0), n.attr_int("keepdims", 1) != 0,
                n.attr_int("select_last_index", 0) != 0}) {}
  DType output_dtype(size_t, const std::vector<DType>&) const override { return DType::kInt64; }
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(attrs.axis, ctx.rank(0));
    Shape out = ctx.shape(0);
    if (attrs.keepdims)
      out[size_t(a)] = Dim(1);
    else
      out.erase(out.begin() + a);
    ctx.set(0, DType::kInt64, out);
  }
};

const bool kRegistered = register_ops({
    {"", "ReduceSum", factory<ReduceOp>()},
    {"", "ReduceMean", factory<ReduceOp>()},
    {"", "ReduceMax", factory<ReduceOp>()},
    {"", "ReduceMin", factory<ReduceOp>()},
    {"", "ReduceProd", factory<ReduceOp>()},
    {"", "ReduceL1", factory<ReduceOp>()},
    {"", "ReduceL2", factory<ReduceOp>()},
    {"", "ReduceSumSquare", factory<ReduceOp>()},
    {"", "ReduceLogSum", factory<ReduceOp>()},
    {"", "ReduceLogSumExp", factory<ReduceOp>()},
    {"", "ArgMax", factory<ArgReduceOp>()},
    {"", "ArgMin", factory<ArgReduceOp>()},
});

}  // namespace

std::vector<bool> ReduceAttrs::mask(InferCtx& ctx) const {
  int64_t r = ctx.rank(0);
  std::vector<int64_t> a = axes;
  if (!has_axes_attr && ctx.has(1)) {
    auto v = ctx.int_values(1);
    if (!v) ctx.unknown("axes");
    a = *v;
  }
  std::vector<bool> m(size_t(r), a.empty() && !noop_empty);
  for (int64_t x : a) m[size_t(ctx.axis(x, r))] = true;
  return m;
}

}  // namespace onnxtrain::ops
