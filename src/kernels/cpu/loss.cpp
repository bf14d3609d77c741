// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (weights, ignore_index, reductions none/sum/mean; the
// optional log-probability output).
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"
#include "ops/loss.h"

namespace onnxtrain::kernels {
namespace {

using ops::LossAttrs;

void loss(const LossAttrs& a, KernelCtx& c) {
  const Tensor& x = c.in(0);  // (N, C, d...)
  auto labels = c.in(1).to_int64();
  int64_t n = x.dims()[0], cls = x.dims()[1], d = x.numel() / std::max<int64_t>(n * cls, 1);
  dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = c.has(2) ? c.in(2).data<T>() : nullptr;
    // log-probabilities: the input itself (NLL) or its log-softmax over C.
    std::vector<T> logp_buf;
    const T* lp = x.data<T>();
    if (a.softmax) {
      T* dst = c.wants(1) ? c.out(1).data<T>() : (logp_buf.resize(size_t(x.numel())), logp_buf.data());
      const T* xp = x.data<T>();
      for (int64_t b = 0; b < n; ++b)
        for (int64_t j = 0; j < d; ++j) {
          T m = -INFINITY;
          for (int64_t k = 0; k < cls; ++k) m = std::max(m, xp[(b * cls + k) * d + j]);
          T s = 0;
          for (int64_t k = 0; k < cls; ++k) s += std::exp(xp[(b * cls + k) * d + j] - m);
          T lse = m + std::log(s);
          for (int64_t k = 0; k < cls; ++k) dst[(b * cls + k) * d + j] = xp[(b * cls + k) * d + j] - lse;
        }
      lp = dst;
    }
    std::vector<T> per(size_t(n * d));  // (N, d...)
    double total = 0, wsum = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t j = 0; j < d; ++j) {
        int64_t t = labels[size_t(b * d + j)];
        if (a.has_ignore && t == a.ignore_index) {
          per[size_t(b * d + j)] = T(0);
          continue;
        }
        if (t < 0 || t >= cls)
          c.fail("label " + std::to_string(t) + " is out of range for " + std::to_string(cls) + " classes");
        T wt = w ? w[t] : T(1);
        per[size_t(b * d + j)] = -lp[(b * cls + t) * d + j] * wt;
        total += double(per[size_t(b * d + j)]);
        wsum += double(wt);
      }
    T* out = c.out(0).data<T>();
    if (a.reduction == LossAttrs::kNone) std::copy(per.begin(), per.end(), out);
    else if (a.reduction == LossAttrs::kSum) out[0] = T(total);
    else out[0] = T(wsum == 0 ? 0.0 : total / wsum);
  });
}

const bool kRegistered = register_kernels(
    kCpu, {{"", "NegativeLogLikelihoodLoss", kernel(loss)}, {"", "SoftmaxCrossEntropyLoss", kernel(loss)}});

}  // namespace
}  // namespace onnxtrain::kernels
