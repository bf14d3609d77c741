// Ops that scan or sort along one axis: CumSum and TopK.
#include <algorithm>
#include <numeric>

#include "kernels/cpu/dispatch.h"
#include "ops/axis_util.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

class CumSumOp : public Op {
 public:
  explicit CumSumOp(const ir::Node& n) : exclusive_(n.attr_int("exclusive", 0)), reverse_(n.attr_int("reverse", 0)) {}
  // A bool input counts its true values into int64 (PyTorch's promotion, which its exporter relies on).
  void infer(InferCtx& ctx) const override {
    ctx.set(0, ctx.dtype(0) == DType::kBool ? DType::kInt64 : ctx.dtype(0), ctx.shape(0));
  }
  DType output_dtype(size_t, const std::vector<DType>& in) const override {
    return in[0] == DType::kBool ? DType::kInt64 : in[0];
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& x0 = c.in(0);
    Tensor counted = x0.dtype() == DType::kBool ? Tensor(DType::kInt64, x0.dims()) : Tensor();
    if (counted.defined())
      for (int64_t i = 0; i < x0.numel(); ++i) counted.data<int64_t>()[i] = x0.data<bool>()[i];
    const Tensor& x = counted.defined() ? counted : x0;
    int64_t a = c.in(1).to_int64()[0];
    if (a < -x.rank() || a >= x.rank()) c.fail("axis " + std::to_string(a) + " out of range for " + dims_str(x.dims()));
    AxisView v = axis_view(x.dims(), a < 0 ? a + x.rank() : a);
    kernels::dispatch<kernels::kNumeric>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x.data<T>();
      T* out = c.out(0).data<T>();
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t i = 0; i < v.inner; ++i) {
          T acc = 0;
          for (int64_t k0 = 0; k0 < v.n; ++k0) {
            int64_t k = reverse_ ? v.n - 1 - k0 : k0;
            int64_t idx = (o * v.n + k) * v.inner + i;
            if (exclusive_) {
              out[idx] = acc;
              acc += in[idx];
            } else {
              acc += in[idx];
              out[idx] = acc;
            }
          }
        }
    });
  }
  void grad(GradCtx& g) const override {  // a cumulative sum in the other direction
    g.set_dx(0, g.op("CumSum", {g.dy(0), g.x(1)}, {{"exclusive", int64_t(exclusive_)}, {"reverse", int64_t(!reverse_)}}));
  }

 private:
  bool exclusive_, reverse_;
};
OT_REGISTER_OP("CumSum", CumSumOp);

class TopKOp : public Op {
 public:
  explicit TopKOp(const ir::Node& n)
      : axis_(n.attr_int("axis", -1)), largest_(n.attr_int("largest", 1)),
        k_attr_(n.attr_int("k", -1)) {}
  DType output_dtype(size_t i, const std::vector<DType>& in) const override { return i == 1 ? DType::kInt64 : in[0]; }
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(axis_, ctx.rank(0));
    Dim k;
    if (k_attr_ >= 0) k = Dim(k_attr_);
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
  void compute(ComputeCtx& c) const override {
    const Tensor& x = c.in(0);
    int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
    AxisView v = axis_view(x.dims(), a);
    int64_t k = c.out(0).dims()[size_t(a)];
    kernels::dispatch<kernels::kNumeric>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x.data<T>();
      T* vals = c.out(0).data<T>();
      int64_t* idx = c.wants(1) ? c.out(1).data<int64_t>() : nullptr;
      std::vector<int64_t> order(size_t(v.n));
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t i = 0; i < v.inner; ++i) {
          auto at = [&](int64_t j) { return in[(o * v.n + j) * v.inner + i]; };
          std::iota(order.begin(), order.end(), 0);
          // Ties keep the lower index first, as the ONNX reference does.
          auto cmp = [&](int64_t p, int64_t q) {
            if (at(p) != at(q)) return largest_ ? at(p) > at(q) : at(p) < at(q);
            return p < q;
          };
          std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
          for (int64_t j = 0; j < k; ++j) {
            int64_t dst = (o * k + j) * v.inner + i;
            vals[dst] = at(order[size_t(j)]);
            if (idx) idx[dst] = order[size_t(j)];
          }
        }
    });
  }
  void grad(GradCtx& g) const override {
    if (!g.dy(0)) return;
    g.set_dx(0, g.op("ScatterElements", {g.zeros_like(g.x(0)), g.y(1), g.dy(0)},
                     {{"axis", axis_}, {"reduction", std::string("add")}}));
  }

 private:
  int64_t axis_;
  bool largest_;  // results are always sorted, which `sorted=0` allows
  int64_t k_attr_;
};
OT_REGISTER_OP("TopK", TopKOp);

}  // namespace
}  // namespace onnxtrain::ops
