// The host's parameter updates (kernels/parameter_update.h), over chunks of each tensor on every core.
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/parameter_update.h"

namespace onnxtrain::kernels::cpu {
namespace {

void adamw_update(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                  int64_t step, const AdamWHyper& h) {
  dispatch<kFloats>(x.dtype(), where, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    // PyTorch's scalars, as its kernels take them: Python floats cast to the compute type.
    const A decay = A(1 - h.lr * h.weight_decay), w1 = A(1 - h.beta1), b2 = A(h.beta2), w2 = A(1 - h.beta2);
    const A step_size = A(h.lr / (1 - std::pow(h.beta1, double(step))));
    const A bc2_sqrt = A(std::pow(1 - std::pow(h.beta2, double(step)), 0.5)), eps = A(h.eps);  // (Python's **0.5)
    // lerp(m, g, 1 - beta1) in the form PyTorch's vectorized lerp picks for its weight: fma(c, g - m, base)
    const bool low_weight = w1 < A(0.5);
    const A c = low_weight ? w1 : w1 - A(1);
    const A sign = h.maximize ? A(-1) : A(1);
    T *xp = x.data<T>(), *mp = m.data<T>(), *vp = v.data<T>(), *mx = max_v ? max_v->data<T>() : nullptr;
    const T* gp = g.data<T>();
    auto run = [&](auto amsgrad, auto low) {
      parallel_for(x.numel(), 16, [=](int64_t begin, int64_t end) {
        T* __restrict xr = xp;
        T* __restrict mr = mp;
        T* __restrict vr = vp;
        T* __restrict top = mx;
        const T* __restrict gr = gp;
        for (int64_t i = begin; i < end; ++i) {
          const A gi = sign * A(gr[i]), mi0 = A(mr[i]);
          const A mi = std::fma(c, gi - mi0, decltype(low)::value ? mi0 : gi);
          const A vi = std::fma(w2 * gi, gi, A(vr[i]) * b2);  // v beta2 + (1 - beta2) g g, as addcmul fuses it
          mr[i] = T(mi);
          vr[i] = T(vi);
          A vmax = vi;
          if constexpr (decltype(amsgrad)::value) {
            vmax = std::max(A(top[i]), vi);
            top[i] = T(vmax);
          }
          const A denom = std::sqrt(vmax) / bc2_sqrt + eps;
          xr[i] = T(A(xr[i]) * decay + (-step_size * mi) / denom);  // addcdiv
        }
      });
    };
    if (mx)
      low_weight ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
    else
      low_weight ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
  });
}

void sgd_update(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h) {
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

void accumulate_gradient(const std::string& where, Tensor& acc, const Tensor& g) {
  dispatch<kFloats>(acc.dtype(), where, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* a = acc.data<T>();
    const T* add = g.data<T>();
    parallel_for(acc.numel(), 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) a[i] = T(a[i] + add[i]);
    });
  });
}

const bool kRegistered = register_parameter_updates(DeviceType::kCpu, {adamw_update, sgd_update, accumulate_gradient});

}  // namespace
}  // namespace onnxtrain::kernels::cpu
