// The host's parameter updates (kernels/parameter_update.h), over chunks of each tensor on every core.
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/parameter_math.h"
#include "kernels/parameter_update.h"

namespace onnxtrain::kernels::cpu {
namespace {

void adamw_update(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                  int64_t step, const AdamWHyper& h) {
  dispatch<kFloats>(x.dtype(), where, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const AdamWScalars<A> s = adamw_scalars<A>(h, step);
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
          A xi = A(xr[i]), mi = A(mr[i]), vi = A(vr[i]), vmax = decltype(amsgrad)::value ? A(top[i]) : A(0);
          adamw_element<decltype(amsgrad)::value, decltype(low)::value>(s, A(gr[i]), xi, mi, vi, vmax);
          mr[i] = T(mi);
          vr[i] = T(vi);
          if constexpr (decltype(amsgrad)::value) top[i] = T(vmax);
          xr[i] = T(xi);
        }
      });
    };
    if (mx)
      s.low_weight ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
    else
      s.low_weight ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
  });
}

void sgd_update(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h) {
  dispatch<kFloats>(x.dtype(), where, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const SgdScalars<A> s = sgd_scalars<A>(h);
    T *xp = x.data<T>(), *bp = buf ? buf->data<T>() : nullptr;
    const T* gp = g.data<T>();
    auto run = [&](auto momentum) {
      parallel_for(x.numel(), 8, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          A xi = A(xp[i]), b = decltype(momentum)::value ? A(bp[i]) : A(0);
          sgd_element<decltype(momentum)::value>(s, first, A(gp[i]), xi, b);
          if constexpr (decltype(momentum)::value) bp[i] = T(b);
          xp[i] = T(xi);
        }
      });
    };
    bp ? run(std::true_type{}) : run(std::false_type{});
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
