// CPU kernels of the elementwise ops of two or more inputs: each binary op is one functor line; the
// broadcast loop (kernels/cpu/broadcast.h) and the dtype dispatch are written once, in `binary`.
#include <cmath>
#include <functional>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/wrapping.h"
#include "kernels/kernel.h"
#include "ops/elementwise.h"

namespace onnxtrain::kernels {
namespace {

using ops::BinaryAttrs;

// f(attributes, a, b) over the broadcast inputs, for the dtypes of `Types`.
template <int Types, typename F>
KernelFn binary(F f) {
  return kernel_with<BinaryAttrs>([f](const BinaryAttrs& at, KernelCtx& c) {
    dispatch<Types>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      broadcast_apply<2, T>(c.out(0).data<T>(), c.out(0).dims(), {c.in(0).data<T>(), c.in(1).data<T>()},
                            {&c.in(0).dims(), &c.in(1).dims()},
                            [&](T a, T b) { return T(f(at, acc_t<T>(a), acc_t<T>(b))); });
    });
  });
}

template <typename T>
T mod(bool fmod, T a, T b) {  // fmod: the sign of a (C's fmod); else the sign of b (Python's %)
  if constexpr (kFloat<T>) {
    T r = std::fmod(a, b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    if (b == 0 || (kWraps<T> && b == T(-1))) return T(0);  // INT_MIN % -1 traps
    T r = T(a % b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = T(wrapping_add(r, b));
    return r;
  }
}

template <typename T>
T divide(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return b == 0 ? T(0) : kWraps<T> && b == T(-1) ? T(wrapping_neg(a)) : T(a / b);  // no trap on 0 or -1
  else
    return a / b;
}

// Comparisons: any input dtype, bool output.
template <typename F>
KernelFn compare() {
  return kernel([](KernelCtx& c) {
    dispatch<kAll>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      broadcast_apply<2, T>(c.out(0).data<bool>(), c.out(0).dims(), {c.in(0).data<T>(), c.in(1).data<T>()},
                            {&c.in(0).dims(), &c.in(1).dims()}, [](T a, T b) { return F()(a, b); });
    });
  });
}

// Pow: the exponent may have another dtype than the base; the result has the base's.
void pow(KernelCtx& c) {
  const Tensor &x = c.in(0), &y = c.in(1);
  dispatch<kNumeric>(x.dtype(), c.node.where(), [&](auto tx) {
    using T = typename decltype(tx)::type;
    if (y.dtype() == x.dtype()) {
      broadcast_apply<2, T>(c.out(0).data<T>(), c.out(0).dims(), {x.data<T>(), y.data<T>()}, {&x.dims(), &y.dims()},
                            [](T a, T b) {
                              if constexpr (kFloat<T>) {
                                if (b == T(2)) return T(a * a);
                                return T(std::pow(acc_t<T>(a), acc_t<T>(b)));
                              } else {
                                return from_double<T>(std::pow(double(a), double(b)));
                              }
                            });
      return;
    }
    dispatch<kNumeric>(y.dtype(), c.node.where(), [&](auto ty) {
      using U = typename decltype(ty)::type;
      const T* a = x.data<T>();
      const U* b = y.data<U>();
      T* o = c.out(0).data<T>();
      broadcast_rows<2>(c.out(0).dims(), {&x.dims(), &y.dims()}, [&](int64_t oo, auto off, auto st, int64_t len) {
        for (int64_t j = 0; j < len; ++j)
          o[oo + j] = from_double<T>(std::pow(to_double(a[off[0] + j * st[0]]), to_double(b[off[1] + j * st[1]])));
      });
    });
  });
}

// Max, Min, Sum, Mean: any number of inputs; the output starts as input 0 broadcast, each further input is
// folded in place by f; Mean divides at the end.
template <typename F>
KernelFn variadic(F f, bool mean = false) {
  return [f, mean](const ops::Op&, KernelCtx& c) {
    Tensor& out = c.out(0);
    dispatch<kNumeric>(out.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = out.data<T>();
      const auto& od = out.dims();
      broadcast_apply<1, T>(o, od, {c.in(0).data<T>()}, {&c.in(0).dims()}, [](T a) { return a; });
      for (size_t k = 1; k < c.inputs.size(); ++k)
        broadcast_apply<2, T>(o, od, {static_cast<const T*>(o), c.in(k).data<T>()}, {&od, &c.in(k).dims()},
                              [&](T a, T b) { return T(f(acc_t<T>(a), acc_t<T>(b))); });
      if (mean) {
        acc_t<T> n = acc_t<T>(c.inputs.size());
        for (int64_t i = 0; i < out.numel(); ++i) o[i] = T(o[i] / n);
      }
    });
  };
}

void where(KernelCtx& c) {
  const bool* cond = c.in(0).data<bool>();
  dispatch_bytes(c.in(1).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = c.in(1).data<T>();
    const T* y = c.in(2).data<T>();
    T* o = c.out(0).data<T>();
    broadcast_rows<3>(c.out(0).dims(), {&c.in(0).dims(), &c.in(1).dims(), &c.in(2).dims()},
                      [&](int64_t oo, auto off, auto st, int64_t len) {
                        const bool* cr = cond + off[0];
                        const T* xr = x + off[1];
                        const T* yr = y + off[2];
                        for (int64_t j = 0; j < len; ++j) o[oo + j] = cr[j * st[0]] ? xr[j * st[1]] : yr[j * st[2]];
                      });
  });
}

// Clip: bounds from attributes (opset < 11) or from optional scalar inputs; min > max gives max, as ONNX says.
void clip(const ops::ClipAttrs& a, KernelCtx& c) {
  dispatch<kNumeric>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    if constexpr (kFloat<T>) {
      lo = T(a.min);
      hi = T(a.max);
    }
    if (c.has(1) && c.in(1).numel()) lo = c.in(1).data<T>()[0];
    if (c.has(2) && c.in(2).numel()) hi = c.in(2).data<T>()[0];
    const T* x = c.in(0).data<T>();
    T* y = c.out(0).data<T>();
    for (int64_t i = 0, n = c.in(0).numel(); i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
  });
}

// Whether a Mul by one factor of exactly 1 writes in its operand's place: x * 1 is x (a gradient formed in forward
// scaled by the loss's gradient of 1, say), bit for bit, so there is nothing to write.
bool in_place_by_one(const KernelCtx& c) {
  const Tensor &x = c.in(0), &f = c.in(1);
  if (c.out(0).raw() != x.raw() || f.numel() != 1 || c.out(0).dims() != x.dims() || f.dtype() != x.dtype())
    return false;
  bool one = false;
  dispatch<kNumeric>(f.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    one = f.data<T>()[0] == T(1);
  });
  return one;
}

KernelFn multiply() {
  KernelFn mul = binary<kNumeric>([](auto, auto a, auto b) { return wrapping_mul(a, b); });
  return [mul](const ops::Op& op, KernelCtx& c) {
    if (!in_place_by_one(c)) mul(op, c);
  };
}

auto nan_first_max = [](auto a, auto b) { return (std::isnan(double(a)) || a >= b) ? a : b; };
auto nan_first_min = [](auto a, auto b) { return (std::isnan(double(a)) || a <= b) ? a : b; };

const bool kRegistered = register_kernels(
    kCpu, {
              {"", "Add", binary<kNumeric>([](auto, auto a, auto b) { return wrapping_add(a, b); })},
              {"", "Sub", binary<kNumeric>([](auto, auto a, auto b) { return wrapping_sub(a, b); })},
              {"", "Mul", multiply()},
              {"", "Div", binary<kNumeric>([](auto, auto a, auto b) { return divide(a, b); })},
              {"", "Mod", binary<kNumeric>([](const BinaryAttrs& at, auto a, auto b) { return mod(at.fmod, a, b); })},
              {"", "PRelu", binary<kNumeric>([](auto, auto x, auto slope) { return x < 0 ? slope * x : x; })},
              {"", "And", binary<kBool>([](auto, bool a, bool b) { return a && b; })},
              {"", "Or", binary<kBool>([](auto, bool a, bool b) { return a || b; })},
              {"", "Xor", binary<kBool>([](auto, bool a, bool b) { return a != b; })},
              {"", "Equal", compare<std::equal_to<>>()},
              {"", "Less", compare<std::less<>>()},
              {"", "LessOrEqual", compare<std::less_equal<>>()},
              {"", "Greater", compare<std::greater<>>()},
              {"", "GreaterOrEqual", compare<std::greater_equal<>>()},
              {"", "Pow", kernel(pow)},
              {"", "Max", variadic(nan_first_max)},
              {"", "Min", variadic(nan_first_min)},
              {"", "Sum", variadic([](auto a, auto b) { return wrapping_add(a, b); })},
              {"", "Mean", variadic([](auto a, auto b) { return wrapping_add(a, b); }, true)},
              {"", "Where", kernel(where)},
              {"", "Clip", kernel(clip)},
          });

}  // namespace
}  // namespace onnxtrain::kernels
