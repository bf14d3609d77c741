// Cast and CastLike between every held dtype (float16 and bfloat16 through float).
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

template <typename F>
void dispatch_any(DType t, const std::string& where, F&& fn) {
  if (t == DType::kFloat16) return fn(Tag<Half>{});
  if (t == DType::kBFloat16) return fn(Tag<BFloat16>{});
  dispatch<kAll>(t, where, fn);
}

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, BFloat16>) return DType::kBFloat16;
  return DType::kFloat16;
}

template <typename From, typename To>
To convert(From v) {
  if constexpr (std::is_same_v<From, To>)
    return v;
  else if constexpr (std::is_same_v<To, bool>)
    return to_double(v) != 0;
  else if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>)
    return from_double<To>(std::trunc(to_double(v)));
  else if constexpr (std::is_integral_v<To> && std::is_integral_v<From>)
    return To(v);
  else
    return from_double<To>(to_double(v));
}

// float32 <-> bfloat16 / float16, the casts of autocast: vectorised, in parallel.
template <typename From, typename To>
bool fast_cast(const Tensor& in, Tensor& out) {
  if (in.dtype() != dtype_of<From>() || out.dtype() != dtype_of<To>()) return false;
  const From* x = in.data<From>();
  To* y = out.data<To>();
  parallel_for(in.numel(), 2, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<From, float>)
      from_f32(x + b, y + b, e - b);
    else
      to_f32(x + b, y + b, e - b);
  });
  return true;
}

void cast(KernelCtx& c) {
  const Tensor& in = c.in(0);
  Tensor& out = c.out(0);
  if (fast_cast<float, BFloat16>(in, out) || fast_cast<BFloat16, float>(in, out) || fast_cast<float, Half>(in, out) ||
      fast_cast<Half, float>(in, out))
    return;
  dispatch_any(in.dtype(), c.node.where(), [&](auto tf) {
    using From = typename decltype(tf)::type;
    dispatch_any(out.dtype(), c.node.where(), [&](auto tt) {
      using To = typename decltype(tt)::type;
      const From* x = in.data<From>();
      To* y = out.data<To>();
      for (int64_t i = 0, n = in.numel(); i < n; ++i) y[i] = convert<From, To>(x[i]);
    });
  });
}

const bool kRegistered = register_kernels(kCpu, {{"", "Cast", kernel(cast)}, {"", "CastLike", kernel(cast)}});

}  // namespace
}  // namespace onnxtrain::kernels
