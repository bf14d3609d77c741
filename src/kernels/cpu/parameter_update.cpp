#include "kernels/cpu/parameter_update.h"

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"

namespace onnxtrain::kernels {

static void check_like(const std::string& where, const Tensor& x, const Tensor* t, const char* what) {
  if (!t) return;
  if (t->dtype() != x.dtype() || t->numel() != x.numel())
    throw InputError(where + ": " + what + " is " + dtype_name(t->dtype()) + " " + dims_str(t->dims()) +
                     ", the parameter " + dtype_name(x.dtype()) + " " + dims_str(x.dims()));
}

void adamw_update(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                  int64_t step, const AdamWHyper& h) {
  check_like(where, x, &g, "the gradient");
  check_like(where, x, &m, "exp_avg");
  check_like(where, x, &v, "exp_avg_sq");
  check_like(where, x, max_v, "max_exp_avg_sq");
  if (h.amsgrad != (max_v != nullptr)) throw InputError(where + ": amsgrad needs max_exp_avg_sq, and only it");
  if (step < 1) throw InputError(where + ": step " + std::to_string(step) + " (the first is 1)");
  dispatch<kFloats>(x.dtype(), where, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    // PyTorch's scalars, as its kernels take them: Python floats cast to the compute type.
    const A decay = A(1 - h.lr * h.weight_decay), w1 = A(1 - h.beta1), b2 = A(h.beta2), w2 = A(1 - h.beta2);
    const bool low_weight = w1 < A(0.5);  // lerp's two forms, as PyTorch picks them
    const A step_size = A(h.lr / (1 - std::pow(h.beta1, double(step))));
    const A bc2_sqrt = A(std::pow(1 - std::pow(h.beta2, double(step)), 0.5)), eps = A(h.eps);  // (as Python's **0.5)
    const A sign = h.maximize ? A(-1) : A(1);
    T *xp = x.data<T>(), *mp = m.data<T>(), *vp = v.data<T>(), *mx = max_v ? max_v->data<T>() : nullptr;
    const T* gp = g.data<T>();
    parallel_for(x.numel(), 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const A gi = sign * A(gp[i]), mi0 = A(mp[i]);
        // lerp(m, g, 1 - beta1) in the form PyTorch's vectorized lerp picks for its weight
        const A mi = low_weight ? std::fma(w1, gi - mi0, mi0) : std::fma(w1 - A(1), gi - mi0, gi);
        const A vi = std::fma(w2 * gi, gi, A(vp[i]) * b2);  // v * beta2 + (1 - beta2) g g, as addcmul fuses it
        mp[i] = T(mi);
        vp[i] = T(vi);
        A top = vi;
        if (mx) {
          top = std::max(A(mx[i]), vi);
          mx[i] = T(top);
        }
        const A denom = std::sqrt(top) / bc2_sqrt + eps;
        xp[i] = T(A(xp[i]) * decay + (-step_size * mi) / denom);  // addcdiv
      }
    });
  });
}

void sgd_update(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h) {
  check_like(where, x, &g, "the gradient");
  check_like(where, x, buf, "momentum_buffer");
  if ((h.momentum != 0) != (buf != nullptr))
    throw InputError(where + ": momentum needs a momentum buffer, and only it");
  dispatch<kFloats>(x.dtype(), where, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A lr = A(h.lr), wd = A(h.weight_decay), mu = A(h.momentum), keep = A(1 - h.dampening);
    const A sign = h.maximize ? A(-1) : A(1);
    T *xp = x.data<T>(), *bp = buf ? buf->data<T>() : nullptr;
    const T* gp = g.data<T>();
    parallel_for(x.numel(), 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {  // each add with alpha a fused multiply-add, as PyTorch's
        const A xi = A(xp[i]);
        A d = std::fma(xi, wd, sign * A(gp[i]));
        if (bp) {
          const A b = first ? d : std::fma(d, keep, A(bp[i]) * mu);
          bp[i] = T(b);
          d = h.nesterov ? std::fma(b, mu, d) : b;
        }
        xp[i] = T(std::fma(d, -lr, xi));
      }
    });
  });
}

}  // namespace onnxtrain::kernels
