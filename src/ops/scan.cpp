// Ops that scan or sort along one axis: CumSum and TopK.
#include "ops/scan.h"

#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

class CumSumOp : public OpWith<CumSumAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }  // the kernel reads the axis
  explicit CumSumOp(const ir::Node& n) : OpWith({n.attr_int("exclusive", 0) != 0, n.attr_int("reverse", 0) != 0}) {}
  // A bool input counts its true values into int64 (PyTorch's promotion, which its exporter relies on).
  void infer(InferCtx& ctx) const override {
    ctx.set(0, ctx.dtype(0) == DType::kBool ? DType::kInt64 : ctx.dtype(0), ctx.shape(0));
  }
  DType output_dtype(size_t, const std::vector<DType>& in) const override {
    return in[0] == DType::kBool ? DType::kInt64 : in[0];
  }
  void grad(GradCtx& g) const override {  // a cumulative sum in the other direction
    g.set_dx(0, g.op("CumSum", {g.dy(0), g.x(1)},
                     {{"exclusive", int64_t(attrs.exclusive)}, {"reverse", int64_t(!attrs.reverse)}}));
  }
};

class TopKOp : public OpWith<TopKAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  explicit TopKOp(const ir::Node& n)
      : OpWith({n.attr_int("axis", -1), n.attr_int("largest", 1) != 0, n.attr_int("k", -1)}) {}
  DType output_dtype(size_t i, const std::vector<DType>& in) const override { return i == 1 ? DType::kInt64 : in[0]; }
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(attrs.axis, ctx.rank(0));
    Dim k;
    if (attrs.k >= 0)
      k = Dim(attrs.k);
    else {
      auto* v = ctx.value(1);
      if (!v || v->size() != 1) ctx.unknown("k");
      k = (*v)[0];
    }
    const Dim& n = ctx.shape(0)[size_t(a)];
    if (k.is_const() && n.is_const() && k.value() > n.value())
      ctx.fail("k = " + k.str() + " exceeds the axis size " + n.str());
    Shape out = ctx.shape(0);
    out[size_t(a)] = k;
    ctx.set(0, ctx.dtype(0), out);
    ctx.set(1, DType::kInt64, out);
  }
  void grad(GradCtx& g) const override {
    if (!g.dy(0)) return;
    g.set_dx(0, g.op("ScatterElements", {g.zeros_like(g.x(0)), g.y(1), g.dy(0)},
                     {{"axis", attrs.axis}, {"reduction", std::string("add")}}));
  }
};

const bool kRegistered = register_ops({{"", "CumSum", factory<CumSumOp>()}, {"", "TopK", factory<TopKOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
