// MaxPool (with indices), AveragePool, GlobalAveragePool, GlobalMaxPool.
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/window.h"

namespace onnxtrain::ops {
namespace {

class PoolOp : public Op {
 public:
  explicit PoolOp(const ir::Node& n)
      : max_(n.op_type == "MaxPool"), win_(Window::from_node(n)), include_pad_(n.attr_int("count_include_pad", 0)),
        storage_order_(n.attr_int("storage_order", 0)) {}
  DType output_dtype(size_t i, const std::vector<DType>& in) const override { return i == 1 ? DType::kInt64 : in[0]; }
  void grad(GradCtx& g) const override {  // MaxPool: dy goes back to where each maximum was
    if (!max_ || storage_order_) no_gradient(g);
    g.set_dx(0, g.scatter_add_flat(g.x(0), g.y(1), g.dy(0)));
  }
  bool differentiable_output(size_t i) const override { return i == 0; }
  void infer(InferCtx& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.size() != win_.kernel.size() + 2)
      ctx.fail("input " + shape_str(x) + " does not match a " + std::to_string(win_.kernel.size()) + "-d kernel");
    Shape out = {x[0], x[1]};
    auto sp = win_.out_sizes(Shape(x.begin() + 2, x.end()));
    out.insert(out.end(), sp.begin(), sp.end());
    ctx.set(0, ctx.dtype(0), out);
    ctx.set(1, DType::kInt64, out);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& X = c.in(0);
    size_t nd = win_.kernel.size();
    std::vector<int64_t> in_sp(X.dims().begin() + 2, X.dims().end()), out_sp(c.out(0).dims().begin() + 2, c.out(0).dims().end());
    auto pads = win_.resolved_pads(in_sp);
    int64_t planes = X.dims()[0] * X.dims()[1], in_size = numel_of(in_sp), out_size = numel_of(out_sp);
    int64_t ksize = numel_of(win_.kernel);
    kernels::dispatch<kernels::kNumeric>(X.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = X.data<T>();
      T* y = c.out(0).data<T>();
      int64_t* ind = c.wants(1) ? c.out(1).data<int64_t>() : nullptr;
      parallel_for(planes, out_size * ksize, [&](int64_t pb, int64_t pe) {
        std::vector<int64_t> start(nd), kidx(nd);
        for (int64_t p = pb; p < pe; ++p)
          for (int64_t o = 0; o < out_size; ++o) {
            int64_t orem = o;
            for (int64_t d = int64_t(nd) - 1; d >= 0; --d) {
              start[size_t(d)] = (orem % out_sp[size_t(d)]) * win_.strides[size_t(d)] - pads[size_t(d)];
              orem /= out_sp[size_t(d)];
            }
            double acc = max_ ? -INFINITY : 0;
            int64_t best = -1, count = 0, padded_count = 0;
            for (int64_t k = 0; k < ksize; ++k) {
              int64_t krem = k, off = 0;
              bool inside = true, in_padded = true;
              for (int64_t d = int64_t(nd) - 1; d >= 0; --d) {
                kidx[size_t(d)] = start[size_t(d)] + (krem % win_.kernel[size_t(d)]) * win_.dilations[size_t(d)];
                krem /= win_.kernel[size_t(d)];
                int64_t pos = kidx[size_t(d)];
                if (pos < 0 || pos >= in_sp[size_t(d)]) inside = false;
                if (pos < -pads[size_t(d)] || pos >= in_sp[size_t(d)] + pads[size_t(d) + nd]) in_padded = false;
              }
              if (in_padded) ++padded_count;
              if (!inside) continue;
              for (size_t d = 0; d < nd; ++d) off = off * in_sp[d] + kidx[d];
              double v = double(xp[p * in_size + off]);
              ++count;
              if (max_) {
                if (v > acc || best < 0) acc = v, best = off;
              } else {
                acc += v;
              }
            }
            if (max_) {
              y[p * out_size + o] = T(acc);
              if (ind) ind[p * out_size + o] = p * in_size + (storage_order_ ? column_major(best, in_sp) : best);
            } else {
              int64_t div = include_pad_ ? padded_count : count;
              y[p * out_size + o] = T(div ? acc / double(div) : 0.0);
            }
          }
      });
    });
  }

 private:
  static int64_t column_major(int64_t off, const std::vector<int64_t>& dims) {
    std::vector<int64_t> idx(dims.size());
    for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) {
      idx[size_t(d)] = off % dims[size_t(d)];
      off /= dims[size_t(d)];
    }
    int64_t r = 0;
    for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) r = r * dims[size_t(d)] + idx[size_t(d)];
    return r;
  }
  bool max_;
  Window win_;
  bool include_pad_, storage_order_;
};
OT_REGISTER_OP("MaxPool", PoolOp);
OT_REGISTER_OP("AveragePool", PoolOp);

class GlobalPoolOp : public Op {
 public:
  explicit GlobalPoolOp(const ir::Node& n) : max_(n.op_type == "GlobalMaxPool") {}
  void grad(GradCtx& g) const override {
    ir::Value *x = g.x(0), *y = g.y(0);
    ir::Value* full = g.op("Expand", {g.dy(0), g.shape(x)});
    if (max_) return g.set_dx(0, g.where_or_zero(g.op("Equal", {x, y}), full));
    ir::Value* count = g.div(g.op("Cast", {g.op("Size", {x})}, {{"to", int64_t(x->dtype)}}),
                             g.op("Cast", {g.op("Size", {y})}, {{"to", int64_t(x->dtype)}}));
    g.set_dx(0, g.div(full, count));
  }
  void infer(InferCtx& ctx) const override {
    Shape out = ctx.shape(0);
    if (out.size() < 2) ctx.fail("input must be (N, C, ...), got " + shape_str(out));
    for (size_t i = 2; i < out.size(); ++i) out[i] = Dim(1);
    ctx.set(0, ctx.dtype(0), out);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& X = c.in(0);
    int64_t planes = X.dims()[0] * X.dims()[1], size = X.numel() / std::max<int64_t>(planes, 1);
    kernels::dispatch<kernels::kFloats>(X.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t p = 0; p < planes; ++p) {
        const T* row = X.data<T>() + p * size;
        double acc = max_ ? -INFINITY : 0;
        for (int64_t i = 0; i < size; ++i) acc = max_ ? std::max(acc, double(row[i])) : acc + double(row[i]);
        c.out(0).data<T>()[p] = T(max_ ? acc : acc / double(size));
      }
    });
  }

 private:
  bool max_;
};
OT_REGISTER_OP("GlobalAveragePool", GlobalPoolOp);
OT_REGISTER_OP("GlobalMaxPool", GlobalPoolOp);

}  // namespace
}  // namespace onnxtrain::ops
