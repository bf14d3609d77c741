// Softmax, LogSoftmax (and Hardmax): along one axis from opset 13, over the
// flattened trailing dims before it.
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/vector_math.h"
#include "ops/axis_util.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

class SoftmaxOp : public Op {
 public:
  enum Kind { kSoftmax, kLogSoftmax, kHardmax };
  explicit SoftmaxOp(const ir::Node& n)
      : kind_(n.op_type == "Softmax" ? kSoftmax : n.op_type == "LogSoftmax" ? kLogSoftmax : kHardmax),
        flatten_(n.opset > 0 && n.opset < 13), axis_(n.attr_int("axis", n.opset > 0 && n.opset < 13 ? 1 : -1)) {}
  void infer(InferCtx& ctx) const override {
    ctx.axis(axis_, ctx.rank(0));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& x = c.in(0);
    int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
    AxisView v = flatten_ ? flatten_view(x.dims(), a) : axis_view(x.dims(), a);
    kernels::dispatch<kernels::kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = x.data<T>();
      T* out = c.out(0).data<T>();
      parallel_for(v.outer * v.inner, v.n * 8, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          int64_t o = r / v.inner, i = r % v.inner;
          run_row(in + o * v.n * v.inner + i, out + o * v.n * v.inner + i, v.n, v.inner);
        }
      });
    });
  }
  int inplace_input() const override { return 0; }
  bool recomputable() const override { return true; }
  void grad(GradCtx& g) const override {
    ir::Value *y = g.y(0), *dy = g.dy(0);
    int64_t r = int64_t(y->shape.size()), a = axis_ < 0 ? axis_ + r : axis_;
    if (kind_ == kHardmax || (flatten_ && a != r - 1)) no_gradient(g);
    ir::Value* axes = g.ints({a});
    ir::Attributes keep = {{"keepdims", int64_t(1)}};
    if (kind_ == kSoftmax)  // y (dy - sum(dy y))
      g.set_dx(0, g.mul(y, g.sub(dy, g.op("ReduceSum", {g.mul(dy, y), axes}, keep))));
    else  // dy - exp(y) sum(dy)
      g.set_dx(0, g.sub(dy, g.mul(g.op("Exp", {y}), g.op("ReduceSum", {dy, axes}, keep))));
  }

 private:
  template <typename T>
  void run_row(const T* x, T* y, int64_t n, int64_t stride) const {
    if constexpr (std::is_same_v<T, float>) {
      if (kind_ == kSoftmax && stride == 1) return kernels::softmax_f32(x, y, n);  // contiguous rows: vectorised
    }
    T m = -INFINITY;
    int64_t arg = 0;
    for (int64_t k = 0; k < n; ++k)
      if (x[k * stride] > m) m = x[k * stride], arg = k;
    if (kind_ == kHardmax) {
      for (int64_t k = 0; k < n; ++k) y[k * stride] = T(k == arg);
      return;
    }
    T sum = 0;
    if (kind_ == kSoftmax) {
      for (int64_t k = 0; k < n; ++k) sum += (y[k * stride] = std::exp(x[k * stride] - m));
      T inv = T(1) / sum;
      for (int64_t k = 0; k < n; ++k) y[k * stride] *= inv;
    } else {
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[k * stride] - m);
      T lse = m + std::log(sum);
      for (int64_t k = 0; k < n; ++k) y[k * stride] = x[k * stride] - lse;
    }
  }

  Kind kind_;
  bool flatten_;
  int64_t axis_;
};
OT_REGISTER_OP("Softmax", SoftmaxOp);

OT_REGISTER_OP("LogSoftmax", SoftmaxOp);
OT_REGISTER_OP("Hardmax", SoftmaxOp);

}  // namespace
}  // namespace onnxtrain::ops
