// ONNX's training optimizers (domain ai.onnx.preview.training): Momentum, Adagrad, Adam. Each updates any number
// of tensors: inputs R, T, then per tensor group X..., G..., state...; outputs the new X... and state....
#include "ops/optimizers.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

using ops::OptimizerAttrs;

// The number of tensors the node updates, after checking that it has R and T as scalars and, per tensor, its
// groups (X, G, state...) of one dtype and shape.
size_t tensors(const OptimizerAttrs& at, KernelCtx& c) {
  size_t groups = size_t(at.groups), given = c.inputs.size();
  if (given < 2 || (given - 2) % groups != 0)
    c.fail(std::to_string(given) + " inputs are not R, T and " + std::to_string(groups) + " per tensor");
  if (c.in(0).numel() != 1 || c.in(1).numel() != 1) c.fail("R and T are not single values");
  size_t n = at.count(given);
  for (size_t k = 0; k < n; ++k)
    for (size_t g = 1; g < groups; ++g) {
      const Tensor &x = c.in(2 + k), &y = c.in(2 + g * n + k);
      if (x.dtype() != y.dtype() || x.dims() != y.dims())
        c.fail("input " + std::to_string(2 + g * n + k) + " is " + dtype_name(y.dtype()) + dims_str(y.dims()) +
               ", the tensor it goes with " + dtype_name(x.dtype()) + dims_str(x.dims()));
    }
  return n;
}

// Copies input `in` into output `out` (the update then runs in place on the output).
void copy(KernelCtx& c, size_t in, size_t out) {
  if (c.wants(out)) std::memcpy(c.out(out).raw(), c.in(in).raw(), c.in(in).nbytes());
}

void momentum(const OptimizerAttrs& at, KernelCtx& c) {
  size_t n = tensors(at, c);
  double lr = c.in(0).to_double()[0];
  int64_t t = c.in(1).to_int64()[0];
  for (size_t k = 0; k < n; ++k) {
    copy(c, 2 + k, k);
    copy(c, 2 + 2 * n + k, n + k);
    dispatch<kFloats>(c.in(2 + k).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      momentum_step<T>(c.in(2 + k).numel(), c.out(k).data<T>(), c.in(2 + n + k).data<T>(), c.out(n + k).data<T>(), lr,
                       at.l2, at.alpha, t > 0 ? at.beta : 1.0, at.nesterov);
    });
  }
}

void adagrad(const OptimizerAttrs& at, KernelCtx& c) {
  size_t n = tensors(at, c);
  double r = c.in(0).to_double()[0] / (1 + double(c.in(1).to_int64()[0]) * at.decay);
  for (size_t k = 0; k < n; ++k) {
    dispatch<kFloats>(c.in(2 + k).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *x = c.in(2 + k).data<T>(), *g = c.in(2 + n + k).data<T>(), *h = c.in(2 + 2 * n + k).data<T>();
      T *xo = c.out(k).data<T>(), *ho = c.out(n + k).data<T>();
      for (int64_t i = 0; i < c.in(2 + k).numel(); ++i) {
        double gr = at.l2 * double(x[i]) + double(g[i]);
        double hn = double(h[i]) + gr * gr;
        ho[i] = T(hn);
        xo[i] = T(double(x[i]) - r * gr / (std::sqrt(hn) + at.epsilon));
      }
    });
  }
}

void adam(const OptimizerAttrs& at, KernelCtx& c) {
  size_t n = tensors(at, c);
  double r = c.in(0).to_double()[0];
  int64_t t = c.in(1).to_int64()[0];
  if (t > 0) r = r * std::sqrt(1 - std::pow(at.beta, double(t))) / (1 - std::pow(at.alpha, double(t)));
  for (size_t k = 0; k < n; ++k) {
    dispatch<kFloats>(c.in(2 + k).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *x = c.in(2 + k).data<T>(), *g = c.in(2 + n + k).data<T>();
      const T *v = c.in(2 + 2 * n + k).data<T>(), *h = c.in(2 + 3 * n + k).data<T>();
      T *xo = c.out(k).data<T>(), *vo = c.out(n + k).data<T>(), *ho = c.out(2 * n + k).data<T>();
      for (int64_t i = 0; i < c.in(2 + k).numel(); ++i) {
        double gr = at.l2 * double(x[i]) + double(g[i]);
        double vn = at.alpha * double(v[i]) + (1 - at.alpha) * gr;
        double hn = at.beta * double(h[i]) + (1 - at.beta) * gr * gr;
        vo[i] = T(vn);
        ho[i] = T(hn);
        xo[i] = T((1 - at.post) * (double(x[i]) - r * vn / (std::sqrt(hn) + at.epsilon)));
      }
    });
  }
}

constexpr const char* kDomain = "ai.onnx.preview.training";
const bool kRegistered = register_kernels(kCpu, {
                                                    {kDomain, "Momentum", kernel(momentum)},
                                                    {kDomain, "Adagrad", kernel(adagrad)},
                                                    {kDomain, "Adam", kernel(adam)},
                                                });

}  // namespace
}  // namespace onnxtrain::kernels
