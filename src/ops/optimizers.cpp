// ONNX's training optimizers (domain ai.onnx.preview.training): Adam, Adagrad,
// Momentum. Each updates any number of tensors: inputs R, T, then per tensor
// group X..., G..., state...; outputs the new X... and state....
#include <cmath>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/optimizer.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

constexpr const char* kDomain = "ai.onnx.preview.training";

class OptimizerOp : public Op {
 public:
  OptimizerOp(const ir::Node& n, int groups) : groups_(groups) {
    if ((n.inputs.size() - 2) % size_t(groups) != 0)
      throw ModelError(n.where() + ": expected R, T and " + std::to_string(groups) + " equal groups of tensors");
  }
  size_t count(size_t inputs) const { return (inputs - 2) / size_t(groups_); }
  void infer(InferCtx& ctx) const override {
    size_t n = count(ctx.num_inputs());
    for (size_t k = 0; k < ctx.num_outputs(); ++k) {
      size_t src = 2 + (k < n ? k : n * 2 + (k - n));  // X_new like X; state_new like state
      ctx.set(k, ctx.dtype(src), ctx.shape(src));
    }
  }

 protected:
  // Copies input `in` into output `out` (the update then runs in place on the output).
  static void copy(ComputeCtx& c, size_t in, size_t out) {
    if (c.wants(out)) std::memcpy(c.out(out).raw(), c.in(in).raw(), c.in(in).nbytes());
  }
  int groups_;
};

class MomentumOp : public OptimizerOp {
 public:
  explicit MomentumOp(const ir::Node& n)
      : OptimizerOp(n, 3), alpha_(n.attr_float("alpha")), beta_(n.attr_float("beta")),
        l2_(n.attr_float("norm_coefficient")), nesterov_(n.attr_string("mode", "standard") == "nesterov") {}
  void compute(ComputeCtx& c) const override {
    size_t n = count(c.inputs.size());
    double lr = c.in(0).to_double()[0];
    int64_t t = c.in(1).to_int64()[0];
    for (size_t k = 0; k < n; ++k) {
      copy(c, 2 + k, k);
      copy(c, 2 + 2 * n + k, n + k);
      kernels::dispatch<kernels::kFloats>(c.in(2 + k).dtype(), c.node.where(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        kernels::momentum_step<T>(c.in(2 + k).numel(), c.out(k).data<T>(), c.in(2 + n + k).data<T>(),
                                  c.out(n + k).data<T>(), lr, l2_, alpha_, t > 0 ? beta_ : 1.0, nesterov_);
      });
    }
  }

 private:
  double alpha_, beta_, l2_;
  bool nesterov_;
};

class AdagradOp : public OptimizerOp {
 public:
  explicit AdagradOp(const ir::Node& n)
      : OptimizerOp(n, 3), decay_(n.attr_float("decay_factor", 0)), eps_(n.attr_float("epsilon", 1e-6f)),
        l2_(n.attr_float("norm_coefficient", 0)) {}
  void compute(ComputeCtx& c) const override {
    size_t n = count(c.inputs.size());
    double r = c.in(0).to_double()[0] / (1 + double(c.in(1).to_int64()[0]) * decay_);
    for (size_t k = 0; k < n; ++k) {
      kernels::dispatch<kernels::kFloats>(c.in(2 + k).dtype(), c.node.where(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T *x = c.in(2 + k).data<T>(), *g = c.in(2 + n + k).data<T>(), *h = c.in(2 + 2 * n + k).data<T>();
        T *xo = c.out(k).data<T>(), *ho = c.out(n + k).data<T>();
        for (int64_t i = 0; i < c.in(2 + k).numel(); ++i) {
          double gr = l2_ * double(x[i]) + double(g[i]);
          double hn = double(h[i]) + gr * gr;
          ho[i] = T(hn);
          xo[i] = T(double(x[i]) - r * gr / (std::sqrt(hn) + eps_));
        }
      });
    }
  }

 private:
  double decay_, eps_, l2_;
};

class AdamOp : public OptimizerOp {
 public:
  explicit AdamOp(const ir::Node& n)
      : OptimizerOp(n, 4), alpha_(n.attr_float("alpha", 0.9f)), beta_(n.attr_float("beta", 0.999f)),
        eps_(n.attr_float("epsilon", 1e-6f)), l2_(n.attr_float("norm_coefficient", 0)),
        post_(n.attr_float("norm_coefficient_post", 0)) {}
  void compute(ComputeCtx& c) const override {
    size_t n = count(c.inputs.size());
    double r = c.in(0).to_double()[0];
    int64_t t = c.in(1).to_int64()[0];
    if (t > 0) r = r * std::sqrt(1 - std::pow(beta_, double(t))) / (1 - std::pow(alpha_, double(t)));
    for (size_t k = 0; k < n; ++k) {
      kernels::dispatch<kernels::kFloats>(c.in(2 + k).dtype(), c.node.where(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T *x = c.in(2 + k).data<T>(), *g = c.in(2 + n + k).data<T>();
        const T *v = c.in(2 + 2 * n + k).data<T>(), *h = c.in(2 + 3 * n + k).data<T>();
        T *xo = c.out(k).data<T>(), *vo = c.out(n + k).data<T>(), *ho = c.out(2 * n + k).data<T>();
        for (int64_t i = 0; i < c.in(2 + k).numel(); ++i) {
          double gr = l2_ * double(x[i]) + double(g[i]);
          double vn = alpha_ * double(v[i]) + (1 - alpha_) * gr;
          double hn = beta_ * double(h[i]) + (1 - beta_) * gr * gr;
          vo[i] = T(vn);
          ho[i] = T(hn);
          xo[i] = T((1 - post_) * (double(x[i]) - r * vn / (std::sqrt(hn) + eps_)));
        }
      });
    }
  }

 private:
  double alpha_, beta_, eps_, l2_, post_;
};

const bool kRegistered = register_op(kDomain, "Momentum", factory<MomentumOp>()) &&
                         register_op(kDomain, "Adagrad", factory<AdagradOp>()) &&
                         register_op(kDomain, "Adam", factory<AdamOp>());

}  // namespace
}  // namespace onnxtrain::ops
