// MaxPool (with indices), AveragePool and its gradient, GlobalAveragePool, GlobalMaxPool.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/window.h"

namespace onnxtrain::ops {
namespace {

// The windows of a pooling op over one input: for output position o, the flat offsets of the kernel
// positions inside the input, and how many fall inside the input with its pads (count_include_pad's divisor).
class Windows {
 public:
  Windows(const Window& win, std::vector<int64_t> in_sp, std::vector<int64_t> out_sp)
      : win_(win), in_(std::move(in_sp)), out_(std::move(out_sp)), pads_(win.resolved_pads(in_)),
        start_(in_.size()), kidx_(in_.size()) {}
  int64_t in_size() const { return numel_of(in_); }
  int64_t out_size() const { return numel_of(out_); }
  int64_t kernel_size() const { return numel_of(win_.kernel); }
  const std::vector<int64_t>& in_sizes() const { return in_; }
  // Fills offs with the in-input positions of window o (in kernel order); returns the count within the pads.
  int64_t at(int64_t o, std::vector<int64_t>* offs) {
    const int64_t nd = int64_t(in_.size());
    offs->clear();
    for (int64_t d = nd - 1; d >= 0; --d) {
      start_[size_t(d)] = (o % out_[size_t(d)]) * win_.strides[size_t(d)] - pads_[size_t(d)];
      o /= out_[size_t(d)];
    }
    int64_t padded = 0;
    for (int64_t k = 0, ks = kernel_size(); k < ks; ++k) {
      int64_t krem = k;
      bool inside = true, in_padded = true;
      for (int64_t d = nd - 1; d >= 0; --d) {
        int64_t pos = start_[size_t(d)] + (krem % win_.kernel[size_t(d)]) * win_.dilations[size_t(d)];
        kidx_[size_t(d)] = pos;
        krem /= win_.kernel[size_t(d)];
        if (pos < 0 || pos >= in_[size_t(d)]) inside = false;
        if (pos < -pads_[size_t(d)] || pos >= in_[size_t(d)] + pads_[size_t(d + nd)]) in_padded = false;
      }
      padded += in_padded;
      if (!inside) continue;
      int64_t off = 0;
      for (int64_t d = 0; d < nd; ++d) off = off * in_[size_t(d)] + kidx_[size_t(d)];
      offs->push_back(off);
    }
    return padded;
  }

 private:
  const Window& win_;
  std::vector<int64_t> in_, out_, pads_, start_, kidx_;
};

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

class PoolOp : public Op {
 public:
  explicit PoolOp(const ir::Node& n)
      : node_(n), max_(n.op_type == "MaxPool"), win_(Window::from_node(n)), include_pad_(n.attr_int("count_include_pad", 0)),
        storage_order_(n.attr_int("storage_order", 0)) {}
  DType output_dtype(size_t i, const std::vector<DType>& in) const override { return i == 1 ? DType::kInt64 : in[0]; }
  // MaxPool: dy goes back to where each maximum was; AveragePool: each window's dy / its divisor to each of its
  // positions (com.onnxtrain.AveragePoolGrad, which reads x's shape only: x need not be stashed).
  void grad(GradCtx& g) const override {
    if (max_ && storage_order_) no_gradient(g);
    if (max_) return g.set_dx(0, g.scatter_add_flat(g.x(0), g.y(1), g.dy(0)));
    g.set_dx(0, g.ops("AveragePoolGrad", {g.dy(0), g.shape(g.x(0))}, 1, node_.attrs, "com.onnxtrain")[0]);
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
    int64_t planes = X.dims()[0] * X.dims()[1];
    Windows geometry(win_, spatial(X.dims()), spatial(c.out(0).dims()));
    const int64_t in_size = geometry.in_size(), out_size = geometry.out_size();
    kernels::dispatch<kernels::kNumeric>(X.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = X.data<T>();
      T* y = c.out(0).data<T>();
      int64_t* ind = c.wants(1) ? c.out(1).data<int64_t>() : nullptr;
      parallel_for(planes, out_size * geometry.kernel_size(), [&](int64_t pb, int64_t pe) {
        Windows w = geometry;
        std::vector<int64_t> offs;
        for (int64_t p = pb; p < pe; ++p)
          for (int64_t o = 0; o < out_size; ++o) {
            int64_t padded = w.at(o, &offs);
            double acc = max_ ? -INFINITY : 0;
            int64_t best = -1;
            for (int64_t off : offs) {
              double v = double(xp[p * in_size + off]);
              if (!max_) acc += v;
              else if (v > acc || best < 0) acc = v, best = off;
            }
            if (max_) {
              y[p * out_size + o] = T(acc);
              if (ind) ind[p * out_size + o] = p * in_size + (storage_order_ ? column_major(best, w.in_sizes()) : best);
            } else {
              int64_t div = include_pad_ ? padded : int64_t(offs.size());
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
  const ir::Node& node_;
  bool max_;
  Window win_;
  bool include_pad_, storage_order_;
};
OT_REGISTER_OP("MaxPool", PoolOp);
OT_REGISTER_OP("AveragePool", PoolOp);

// com.onnxtrain.AveragePoolGrad(dY, shape of X), AveragePool's attributes: dX, each window's dY divided by the
// window's divisor (as the forward counted it) added to each of the window's positions.
class AveragePoolGradOp : public Op {
 public:
  explicit AveragePoolGradOp(const ir::Node& n) : win_(Window::from_node(n)), include_pad_(n.attr_int("count_include_pad", 0)) {}
  void infer(InferCtx& ctx) const override {
    const std::vector<Dim>* v = ctx.value(1);
    if (!v) ctx.fail("the shape of X must be known when the graph is built");
    if (v->size() != win_.kernel.size() + 2 || ctx.rank(0) != int64_t(v->size()))
      ctx.fail("dY " + shape_str(ctx.shape(0)) + " and X " + shape_str(Shape(v->begin(), v->end())) + " do not match a " +
               std::to_string(win_.kernel.size()) + "-d kernel");
    ctx.set(0, ctx.dtype(0), Shape(v->begin(), v->end()));
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& dY = c.in(0);
    Tensor& dX = c.out(0);
    int64_t planes = dX.dims()[0] * dX.dims()[1];
    Windows geometry(win_, spatial(dX.dims()), spatial(dY.dims()));
    const int64_t in_size = geometry.in_size(), out_size = geometry.out_size();
    kernels::dispatch<kernels::kFloats>(dY.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* dy = dY.data<T>();
      T* dx = dX.data<T>();
      parallel_for(planes, out_size * geometry.kernel_size(), [&](int64_t pb, int64_t pe) {
        Windows w = geometry;
        std::vector<int64_t> offs;
        std::fill(dx + pb * in_size, dx + pe * in_size, T(0));
        for (int64_t p = pb; p < pe; ++p)
          for (int64_t o = 0; o < out_size; ++o) {
            int64_t padded = w.at(o, &offs), div = include_pad_ ? padded : int64_t(offs.size());
            if (!div) continue;
            T share = T(double(dy[p * out_size + o]) / double(div));
            for (int64_t off : offs) dx[p * in_size + off] += share;
          }
      });
    });
  }

 private:
  Window win_;
  bool include_pad_;
};
const bool kAveragePoolGradRegistered = register_op("com.onnxtrain", "AveragePoolGrad", factory<AveragePoolGradOp>());

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
