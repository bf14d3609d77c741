// LayerNormalization, BatchNormalization (inference and training mode) and
// InstanceNormalization. Statistics are accumulated in double.
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/vector_math.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

using ir::Value;

// The input gradient of xhat = (x - mean) * rstd, normalized over `axes`, given
// dxhat: rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
Value* normalized_dx(GradCtx& g, Value* xhat, Value* rstd, Value* dxhat, const std::vector<int64_t>& axes) {
  ir::Attributes keep = {{"keepdims", int64_t(1)}};
  Value* m1 = g.op("ReduceMean", {dxhat, g.ints(axes)}, keep);
  Value* m2 = g.op("ReduceMean", {g.mul(dxhat, xhat), g.ints(axes)}, keep);
  return g.mul(rstd, g.sub(g.sub(dxhat, m1), g.mul(xhat, m2)));
}

// Batch statistics over `axes` (kept): returns xhat and rstd.
std::pair<Value*, Value*> normalize(GradCtx& g, Value* x, const std::vector<int64_t>& axes, float eps) {
  ir::Attributes keep = {{"keepdims", int64_t(1)}};
  Value* centered = g.sub(x, g.op("ReduceMean", {x, g.ints(axes)}, keep));
  Value* var = g.op("ReduceMean", {g.mul(centered, centered), g.ints(axes)}, keep);
  Value* rstd = g.op("Reciprocal", {g.op("Sqrt", {g.add(var, g.like(eps, var))})});
  return {g.mul(centered, rstd), rstd};
}

std::vector<int64_t> range_axes(int64_t from, int64_t to) {
  std::vector<int64_t> r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

class LayerNormOp : public Op {
 public:
  explicit LayerNormOp(const ir::Node& n) : axis_(n.attr_int("axis", -1)), eps_(n.attr_float("epsilon", 1e-5f)) {}
  void grad(GradCtx& g) const override;
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(axis_, ctx.rank(0));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
    Shape stat = ctx.shape(0);
    for (size_t i = size_t(a); i < stat.size(); ++i) stat[i] = Dim(1);
    ctx.set(1, ctx.dtype(0), stat);
    ctx.set(2, ctx.dtype(0), stat);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& x = c.in(0);
    int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
    int64_t rows = 1, n = 1;
    for (int64_t i = 0; i < x.rank(); ++i) (i < a ? rows : n) *= x.dims()[size_t(i)];
    int64_t nw = c.in(1).numel(), nb = c.has(2) ? c.in(2).numel() : 0;
    kernels::dispatch<kernels::kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      const T* w = c.in(1).data<T>();
      const T* b = c.has(2) ? c.in(2).data<T>() : nullptr;
      T* y = c.out(0).data<T>();
      T* mean_out = c.wants(1) ? c.out(1).data<T>() : nullptr;
      T* rstd_out = c.wants(2) ? c.out(2).data<T>() : nullptr;
      parallel_for(rows, n * 4, [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          const T* row = xp + r * n;
          double mean = 0, var = 0;
          if constexpr (std::is_same_v<T, float>) {
            kernels::mean_var_f32(row, n, &mean, &var);
          } else {
            for (int64_t j = 0; j < n; ++j) mean += row[j];
            mean /= double(n);
            for (int64_t j = 0; j < n; ++j) var += (row[j] - mean) * (row[j] - mean);
            var /= double(n);
          }
          double rstd = 1.0 / std::sqrt(var + double(eps_));
          T m = T(mean), rs = T(rstd);
          T* yr = y + r * n;
          if (nw == n && (!b || nb == n)) {  // scale and bias over the normalized dims (the usual case)
            for (int64_t j = 0; j < n; ++j) yr[j] = (row[j] - m) * rs * w[j] + (b ? b[j] : T(0));
          } else {  // broadcast over them
            for (int64_t j = 0; j < n; ++j) {
              T v = (row[j] - m) * rs * w[j % nw];
              yr[j] = b ? v + b[j % nb] : v;
            }
          }
          if (mean_out) mean_out[r] = m;
          if (rstd_out) rstd_out[r] = rs;
        }
      });
    });
  }

 private:
  int64_t axis_;
  float eps_;
};
OT_REGISTER_OP("LayerNormalization", LayerNormOp);

void LayerNormOp::grad(GradCtx& g) const {
  Value *x = g.x(0), *w = g.x(1), *dy = g.dy(0);
  int64_t r = int64_t(x->shape.size()), a = axis_ < 0 ? axis_ + r : axis_;
  Value* rstd = g.y(2);
  Value* xhat = g.mul(g.sub(x, g.y(1)), rstd);
  if (g.needs(0)) g.set_dx(0, normalized_dx(g, xhat, rstd, g.mul(dy, w), range_axes(a, r)));
  if (g.needs(1)) g.set_dx(1, g.mul(dy, xhat));  // the engine sums the leading dims
  if (g.needs(2)) g.set_dx(2, dy);
}

// Per-channel statistics over (N, spatial) of an (N, C, ...) tensor.
struct ChannelView {
  int64_t n, c, spatial;
};
ChannelView channel_view(const Tensor& x) {
  ChannelView v{x.dims()[0], x.rank() > 1 ? x.dims()[1] : 1, 1};
  for (int64_t i = 2; i < x.rank(); ++i) v.spatial *= x.dims()[size_t(i)];
  return v;
}

class BatchNormOp : public Op {
 public:
  explicit BatchNormOp(const ir::Node& n)
      : eps_(n.attr_float("epsilon", 1e-5f)), momentum_(n.attr_float("momentum", 0.9f)),
        training_(n.attr_int("training_mode", 0)), unbiased_(n.attr_int("unbiased_running_var", 0)) {
    if (n.opset > 0 && n.opset < 9 && n.has_attr("spatial") && n.attr_int("spatial", 1) == 0)
      throw UnsupportedError(n.where() + ": spatial=0 is not supported");
  }
  bool differentiable_output(size_t i) const override { return i == 0; }
  void grad(GradCtx& g) const override {
    Value *x = g.x(0), *dy = g.dy(0);
    int64_t r = int64_t(x->shape.size());
    std::vector<int64_t> axes = {0}, channel_axes = {0};  // all but the channel dim; where [C] broadcasts
    for (int64_t i = 2; i < r; ++i) axes.push_back(i), channel_axes.push_back(i);
    auto per_channel = [&](Value* v) { return g.op("Unsqueeze", {v, g.ints(channel_axes)}); };
    Value *xhat, *rstd;
    if (training_) {
      std::tie(xhat, rstd) = normalize(g, x, axes, eps_);
    } else {
      rstd = per_channel(g.op("Reciprocal", {g.op("Sqrt", {g.add(g.x(4), g.like(eps_, g.x(4)))})}));
      xhat = g.mul(g.sub(x, per_channel(g.x(3))), rstd);
    }
    Value* dxhat = g.mul(dy, per_channel(g.x(1)));
    ir::Attributes drop = {{"keepdims", int64_t(0)}};
    if (g.needs(0)) g.set_dx(0, training_ ? normalized_dx(g, xhat, rstd, dxhat, axes) : g.mul(dxhat, rstd));
    if (g.needs(1)) g.set_dx(1, g.op("ReduceSum", {g.mul(dy, xhat), g.ints(axes)}, drop));
    if (g.needs(2)) g.set_dx(2, g.op("ReduceSum", {dy, g.ints(axes)}, drop));
  }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) < 2) ctx.fail("input must be (N, C, ...), got " + shape_str(ctx.shape(0)));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
    Shape ch = {ctx.shape(0)[1]};
    for (size_t i = 1; i < ctx.num_outputs(); ++i) ctx.set(i, ctx.dtype(3), ch);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& x = c.in(0);
    ChannelView v = channel_view(x);
    kernels::dispatch<kernels::kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *xp = x.data<T>(), *scale = c.in(1).data<T>(), *bias = c.in(2).data<T>();
      const T *rmean = c.in(3).data<T>(), *rvar = c.in(4).data<T>();
      T* y = c.out(0).data<T>();
      for (int64_t ch = 0; ch < v.c; ++ch) {
        double mean = rmean[ch], var = rvar[ch];
        if (training_) {
          double s = 0, s2 = 0, cnt = double(v.n * v.spatial);
          for (int64_t b = 0; b < v.n; ++b)
            for (int64_t i = 0; i < v.spatial; ++i) s += xp[(b * v.c + ch) * v.spatial + i];
          mean = s / cnt;
          for (int64_t b = 0; b < v.n; ++b)
            for (int64_t i = 0; i < v.spatial; ++i) {
              double d = xp[(b * v.c + ch) * v.spatial + i] - mean;
              s2 += d * d;
            }
          var = s2 / cnt;
          if (c.wants(1)) c.out(1).data<T>()[ch] = T(rmean[ch] * momentum_ + mean * (1 - momentum_));
          // ONNX updates running_var with the batch's population variance; PyTorch (the wrapper sets
          // the onnxtrain attribute unbiased_running_var) with the unbiased one.
          double run_var = unbiased_ && cnt > 1 ? var * cnt / (cnt - 1) : var;
          if (c.wants(2)) c.out(2).data<T>()[ch] = T(rvar[ch] * momentum_ + run_var * (1 - momentum_));
        }
        double k = scale[ch] / std::sqrt(var + eps_), off = bias[ch] - mean * k;
        for (int64_t b = 0; b < v.n; ++b)
          for (int64_t i = 0; i < v.spatial; ++i) {
            int64_t idx = (b * v.c + ch) * v.spatial + i;
            y[idx] = T(xp[idx] * k + off);
          }
      }
    });
  }

 private:
  float eps_, momentum_;
  bool training_, unbiased_;
};
OT_REGISTER_OP("BatchNormalization", BatchNormOp);

class InstanceNormOp : public Op {
 public:
  explicit InstanceNormOp(const ir::Node& n) : eps_(n.attr_float("epsilon", 1e-5f)) {}
  void grad(GradCtx& g) const override {
    Value *x = g.x(0), *dy = g.dy(0);
    int64_t r = int64_t(x->shape.size());
    std::vector<int64_t> spatial = range_axes(2, r), batch_spatial = range_axes(2, r), trailing = range_axes(1, r - 1);
    batch_spatial.insert(batch_spatial.begin(), 0);
    auto [xhat, rstd] = normalize(g, x, spatial, eps_);
    Value* dxhat = g.mul(dy, g.op("Unsqueeze", {g.x(1), g.ints(trailing)}));
    ir::Attributes drop = {{"keepdims", int64_t(0)}};
    if (g.needs(0)) g.set_dx(0, normalized_dx(g, xhat, rstd, dxhat, spatial));
    if (g.needs(1)) g.set_dx(1, g.op("ReduceSum", {g.mul(dy, xhat), g.ints(batch_spatial)}, drop));
    if (g.needs(2)) g.set_dx(2, g.op("ReduceSum", {dy, g.ints(batch_spatial)}, drop));
  }
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
  void compute(ComputeCtx& c) const override {
    const Tensor& x = c.in(0);
    ChannelView v = channel_view(x);
    kernels::dispatch<kernels::kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *xp = x.data<T>(), *scale = c.in(1).data<T>(), *bias = c.in(2).data<T>();
      T* y = c.out(0).data<T>();
      parallel_for(v.n * v.c, v.spatial * 4, [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          int64_t ch = r % v.c;
          const T* row = xp + r * v.spatial;
          double s = 0, s2 = 0;
          for (int64_t i = 0; i < v.spatial; ++i) s += row[i];
          double mean = s / double(v.spatial);
          for (int64_t i = 0; i < v.spatial; ++i) s2 += (row[i] - mean) * (row[i] - mean);
          double k = scale[ch] / std::sqrt(s2 / double(v.spatial) + eps_);
          for (int64_t i = 0; i < v.spatial; ++i) y[r * v.spatial + i] = T((row[i] - mean) * k + bias[ch]);
        }
      });
    });
  }

 private:
  float eps_;
};
OT_REGISTER_OP("InstanceNormalization", InstanceNormOp);

}  // namespace
}  // namespace onnxtrain::ops
