// Dropout in training mode: a counter-based random mask (element i keeps when hash(seed, i) >= ratio), so
// rerunning with the same seed gives a bit-identical mask whatever the threading; the identity otherwise.
#include "ops/dropout.h"

#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/counter_random.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

void dropout(const ops::DropoutAttrs& a, KernelCtx& c) {
  const Tensor& x = c.in(0);
  bool training = !a.legacy && c.has(2) && c.in(2).to_int64()[0] != 0;
  float ratio = a.legacy ? a.ratio : (c.has(1) ? float(c.in(1).to_double()[0]) : 0.5f);
  if (training && (ratio < 0 || ratio >= 1)) c.fail("ratio " + std::to_string(ratio) + " must be in [0, 1)");
  int64_t n = x.numel();
  bool* mask = c.wants(1) ? c.out(1).data<bool>() : nullptr;
  if (!training || ratio == 0) {
    if (c.out(0).raw() != x.raw()) std::memcpy(c.out(0).raw(), x.raw(), x.nbytes());
    if (mask) std::memset(mask, 1, size_t(n));
    return;
  }
  uint64_t seed = a.has_seed ? uint64_t(a.seed) : c.seed;
  const uint32_t threshold = dropout_threshold(ratio);
  dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* y = c.out(0).data<T>();
    acc_t<T> scale = acc_t<T>(1.0 / (1.0 - double(ratio)));
    parallel_for(n, 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        bool keep = dropout_keeps(seed, uint64_t(i), threshold);
        y[i] = keep ? T(xp[i] * scale) : T(0);
        if (mask) mask[i] = keep;
      }
    });
  });
}

const bool kRegistered = register_kernels(kCpu, {{"", "Dropout", kernel(dropout)}});

}  // namespace
}  // namespace onnxtrain::kernels
