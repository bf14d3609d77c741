// Dropout in training mode: a counter-based random mask (counter_random.h: element i keeps where its draw reaches the
// ratio), so rerunning with the same seed gives a bit-identical mask whatever the threading; the identity otherwise.
#include "ops/dropout.h"

#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"
#include "core/parallel.h"
#include "kernels/counter_random.h"
#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/dropout_draws.h"
#include "kernels/kernel.h"
#include "kernels/dropout_mode.h"

namespace onnxtrain::kernels {
namespace {

// The mask applied to x (dtype In) into y (dtype Out), in the narrower of the two (M: the 16-bit one where they
// differ, the input rounded to it first), each kept element scaled by `scale`, 0 elsewhere, then the residual r
// added where given (y may be r); the mask to `mask` when given. Out = In: Dropout and DropoutGrad as ONNX has them;
// else attribute `to` (ops/dropout.cpp).
// Where In and Out are float32 or bfloat16: masked's first elements of a run of n, sixteen at a time with AVX-512 (the
// same values: each rounding to bf16 as the scalar loop makes it); how many it did.
template <typename T>
constexpr bool kWide = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;
template <typename T>
ONNXTRAIN_AVX512 __m512 load16(const T* p) {
  if constexpr (std::is_same_v<T, float>)
    return _mm512_loadu_ps(p);
  else
    return load_bf16(p);
}
template <typename In, typename Out>
ONNXTRAIN_AVX512 int64_t masked_avx512(const In* x, const Out* r, Out* y, int64_t n, float scale, const bool* keep) {
  constexpr bool narrow = std::is_same_v<In, BFloat16> || std::is_same_v<Out, BFloat16>;  // (M, below, is bf16)
  const __m512 s = _mm512_set1_ps(scale);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 v = load16(x + k);
    if constexpr (narrow && std::is_same_v<In, float>) v = round_bf16(v);
    v = _mm512_mul_ps(v, s);
    if constexpr (narrow) v = round_bf16(v);
    v = _mm512_maskz_mov_ps(mask_of(keep + k), v);
    if (r) v = _mm512_add_ps(load16(r + k), v);
    if constexpr (std::is_same_v<Out, float>)
      _mm512_storeu_ps(y + k, v);
    else
      store_bf16(y + k, v);
  }
  return k;
}

template <typename In, typename Out>
void masked(const In* x, const Out* r, Out* y, int64_t n, const DropoutCall& d, bool* mask) {
  using M = std::conditional_t<(sizeof(In) < sizeof(Out)), In, Out>;
  const acc_t<M> scale = acc_t<M>(d.scale);
  const uint64_t seed = d.seed;
  const uint32_t threshold = d.threshold;
  parallel_for(n, 4, [&](int64_t b, int64_t e) {
    bool keep[256];
    for (; b < e; b += 256) {
      const int64_t w = std::min<int64_t>(256, e - b);
      dropout_keeps_draw(seed, uint64_t(b), w, threshold, keep);
      int64_t k = 0;
      if constexpr (kWide<In> && kWide<Out>)
        if (cpu::features().avx512) k = masked_avx512(x + b, r ? r + b : nullptr, y + b, w, float(scale), keep);
      for (; k < w; ++k) {
        const Out v = keep[k] ? Out(acc_t<M>(M(acc_t<M>(M(x[b + k])) * scale))) : Out(0.f);
        y[b + k] = r ? Out(acc_t<Out>(r[b + k]) + acc_t<Out>(v)) : v;
      }
      if (mask) std::memcpy(mask + b, keep, size_t(w));
    }
  });
}

// Calls f with a value of In and of Out for the input's and the output's dtypes: one of the float dtypes, or a
// float32 and a 16-bit float the one beside the other.
template <typename F>
void with_dtypes(const KernelCtx& c, F&& f) {
  const DType in = c.in(0).dtype(), out = c.out(0).dtype();
  if (in == out) return dispatch<kFloats>(in, c.node.where(), [&](auto t) { f(t, t); });
  auto narrow = [&](DType t, auto&& g) {
    if (t == DType::kBFloat16) return g(Tag<BFloat16>{});
    if (t == DType::kFloat16) return g(Tag<Half>{});
    throw UnsupportedError(c.node.where() + ": " + dtype_name(in) + " to " + dtype_name(out));
  };
  if (in == DType::kFloat32) return narrow(out, [&](auto o) { f(Tag<float>{}, o); });
  if (out == DType::kFloat32) return narrow(in, [&](auto i) { f(i, Tag<float>{}); });
  throw UnsupportedError(c.node.where() + ": " + dtype_name(in) + " to " + dtype_name(out));
}

// Dropout's and its gradient's kernel: the mask (the node's seed, else the run's) where training with a ratio over 0,
// else input 0 as it is (converted where the dtypes differ), plus the residual `r` where given; the mask where
// wanted.
void apply(const ops::DropoutAttrs& a, KernelCtx& c, const Tensor* r, bool* mask) {
  const Tensor& x = c.in(0);
  Tensor& y = c.out(0);
  const DropoutCall d = dropout_call(a, c, r);
  if (!d.drops && mask) std::memset(mask, 1, size_t(x.numel()));
  if (!d.drops && y.dtype() == x.dtype() && !r) {
    if (y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return;
  }
  with_dtypes(c, [&](auto ti, auto to) {
    using In = typename decltype(ti)::type;
    using Out = typename decltype(to)::type;
    masked(x.data<In>(), r ? r->data<Out>() : nullptr, y.data<Out>(), x.numel(), d, d.drops ? mask : nullptr);
  });
}

void dropout(const ops::DropoutAttrs& a, KernelCtx& c) {
  apply(a, c, c.has(3) ? &c.in(3) : nullptr, c.wants(1) ? c.out(1).data<bool>() : nullptr);
}

// The gradient: the forward's mask drawn again (the node carries the Dropout's key), applied to dy.
void dropout_grad(const ops::DropoutAttrs& a, KernelCtx& c) { apply(a, c, nullptr, nullptr); }

const bool kRegistered = register_kernels(kCpu, {{"", "Dropout", kernel(dropout)},
                                                  {"com.onnxtrain", "Dropout", kernel(dropout)},
                                                  {"com.onnxtrain", "DropoutGrad", kernel(dropout_grad)}});

}  // namespace
}  // namespace onnxtrain::kernels
