// Dropout in training mode: a counter-based random mask (counter_random.h: element i keeps where its draw reaches the
// ratio), so rerunning with the same seed gives a bit-identical mask whatever the threading; the identity otherwise.
#include "ops/dropout.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/parallel.h"
#include "kernels/counter_random.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"
#include "kernels/dropout_mode.h"

namespace onnxtrain::kernels {
namespace {

// out = in where the mask keeps, scaled by 1 / (1 - ratio), 0 elsewhere; the mask to `mask` when given.
void apply_mask(const ops::DropoutAttrs& a, KernelCtx& c, float ratio, bool* mask) {
  const Tensor& x = c.in(0);
  int64_t n = x.numel();
  uint64_t seed = a.has_seed ? uint64_t(a.seed) : c.seed;
  const uint32_t threshold = dropout_threshold(ratio);
  dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* y = c.out(0).data<T>();
    acc_t<T> scale = acc_t<T>(1.0 / (1.0 - double(ratio)));
    parallel_for(n, 4, [&](int64_t b, int64_t e) {
      bool keep[256];
      for (; b < e; b += 256) {
        const int64_t w = std::min<int64_t>(256, e - b);
        dropout_keeps_run(seed, uint64_t(b), w, threshold, keep);
        for (int64_t k = 0; k < w; ++k) y[b + k] = keep[k] ? T(xp[b + k] * scale) : T(0);
        if (mask) std::memcpy(mask + b, keep, size_t(w));
      }
    });
  });
}

void dropout(const ops::DropoutAttrs& a, KernelCtx& c) {
  const Tensor& x = c.in(0);
  std::optional<float> ratio = dropout_training_ratio(a, c);
  bool* mask = c.wants(1) ? c.out(1).data<bool>() : nullptr;
  if (ratio && *ratio > 0) return apply_mask(a, c, *ratio, mask);
  if (c.out(0).raw() != x.raw()) std::memcpy(c.out(0).raw(), x.raw(), x.nbytes());
  if (mask) std::memset(mask, 1, size_t(x.numel()));
}

// The gradient: the forward's mask drawn again (the node carries the Dropout's key), applied to dy.
void dropout_grad(const ops::DropoutAttrs& a, KernelCtx& c) {
  std::optional<float> ratio = dropout_training_ratio(a, c);
  if (ratio && *ratio > 0) return apply_mask(a, c, *ratio, nullptr);
  if (c.out(0).raw() != c.in(0).raw()) std::memcpy(c.out(0).raw(), c.in(0).raw(), c.in(0).nbytes());
}

const bool kRegistered = register_kernels(kCpu, {{"", "Dropout", kernel(dropout)},
                                                  {"com.onnxtrain", "DropoutGrad", kernel(dropout_grad)}});

}  // namespace
}  // namespace onnxtrain::kernels
