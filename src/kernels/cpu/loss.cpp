// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (weights, ignore_index, reductions none/sum/mean; the
// optional log-probability output).
#include "ops/loss.h"

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

using ops::LossAttrs;

// Log-softmax over the class dim of x (N, C, d...) into dst, and the log-sum-exp (N, d...) into lse when given;
// rows of contiguous float32 classes (a language model's logits) vectorised and in parallel.
template <typename T>
void log_softmax_classes(const T* xp, T* dst, T* lse, int64_t n, int64_t cls, int64_t d) {
  if constexpr (std::is_same_v<T, float>) {
    if (d == 1)
      return parallel_for(n, cls * 8, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          float l = log_softmax_f32(xp + b * cls, dst + b * cls, cls);
          if (lse) lse[b] = l;
        }
      });
  }
  for (int64_t b = 0; b < n; ++b)
    for (int64_t j = 0; j < d; ++j) {
      T m = -INFINITY;
      for (int64_t k = 0; k < cls; ++k) m = std::max(m, xp[(b * cls + k) * d + j]);
      T s = 0;
      for (int64_t k = 0; k < cls; ++k) s += std::exp(xp[(b * cls + k) * d + j] - m);
      T l = m + std::log(s);
      if (lse) lse[b * d + j] = l;
      for (int64_t k = 0; k < cls; ++k) dst[(b * cls + k) * d + j] = xp[(b * cls + k) * d + j] - l;
    }
}

// Rows of float32 classes whose log-probabilities nobody asked for (d = 1, output 1 absent): the loss needs only
// each row's log-sum-exp and its target's score, so no (N, C) tensor is written.
bool rows_only(const LossAttrs& a, DType t, int64_t rank, bool log_probs_wanted) {
  return a.softmax && !log_probs_wanted && t == DType::kFloat32 && rank == 2;
}

void loss(const LossAttrs& a, KernelCtx& c) {
  const Tensor& x = c.in(0);  // (N, C, d...)
  auto labels = c.in(1).to_int64();
  int64_t n = x.dims()[0], cls = x.dims()[1], d = x.numel() / std::max<int64_t>(n * cls, 1);
  if (int64_t(labels.size()) != n * d || (c.has(2) && c.in(2).numel() != cls))
    c.fail("scores " + dims_str(x.dims()) + ", labels " + dims_str(c.in(1).dims()) +
           (c.has(2) ? " and weights " + dims_str(c.in(2).dims()) : std::string()) + " do not fit together");
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = c.has(2) ? c.in(2).data<T>() : nullptr;
    T* per = c.scratch_as<T>(0, size_t(n * d));  // (N, d...)
    // log-probabilities: the input itself (NLL) or its log-softmax over C (into output 1, else scratch), or for
    // rows only each row's log-sum-exp (into output 2, else scratch) beside the scores.
    const T* lp = x.data<T>();
    T* lse = nullptr;
    const bool by_rows = rows_only(a, x.dtype(), x.rank(), c.wants(1));
    if (by_rows) {
      lse = c.wants(2) ? c.out(2).data<T>() : c.scratch_as<T>(size_t(n) * sizeof(T), size_t(n));
      if constexpr (std::is_same_v<T, float>)
        parallel_for(n, cls * 4, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) lse[b] = log_sum_exp_f32(lp + b * cls, cls);
        });
    } else if (a.softmax) {
      T* dst = c.wants(1) ? c.out(1).data<T>() : c.scratch_as<T>(size_t(n * d) * sizeof(T), size_t(x.numel()));
      log_softmax_classes(x.data<T>(), dst, c.wants(2) ? c.out(2).data<T>() : nullptr, n, cls, d);
      lp = dst;
    }
    double total = 0, wsum = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t j = 0; j < d; ++j) {
        int64_t t = labels[size_t(b * d + j)];
        if (a.has_ignore && t == a.ignore_index) {
          per[b * d + j] = T(0);
          continue;
        }
        if (t < 0 || t >= cls)
          c.fail("label " + std::to_string(t) + " is out of range for " + std::to_string(cls) + " classes");
        T wt = w ? w[t] : T(1);
        per[b * d + j] = -(by_rows ? lp[b * cls + t] - lse[b] : lp[(b * cls + t) * d + j]) * wt;
        total += double(per[b * d + j]);
        wsum += double(wt);
      }
    T* out = c.out(0).data<T>();
    if (a.reduction == LossAttrs::kNone)
      std::copy(per, per + n * d, out);
    else if (a.reduction == LossAttrs::kSum)
      out[0] = T(total);
    else
      out[0] = T(wsum == 0 ? 0.0 : total / wsum);
  });
}

void softmax_cross_entropy_grad(KernelCtx& c) {
  const Tensor &per = c.in(0), &x = c.in(1), &lse = c.in(2);
  auto target = c.in(3).to_int64();
  int64_t n = x.dims()[0], cls = x.dims()[1], d = x.numel() / std::max<int64_t>(n * cls, 1);
  if (per.numel() != n * d || lse.numel() != n * d || int64_t(target.size()) != n * d)
    c.fail("per " + dims_str(per.dims()) + ", scores " + dims_str(x.dims()) + ", lse " + dims_str(lse.dims()) +
           " and target " + dims_str(c.in(3).dims()) + " do not fit together");
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *p = per.data<T>(), *xp = x.data<T>(), *l = lse.data<T>();
    T* dx = c.out(0).data<T>();
    parallel_for(n, cls * d * 8, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t j = 0; j < d; ++j) {
          const T pj = p[b * d + j], lj = l[b * d + j];
          T* row = dx + b * cls * d + j;  // (C) at stride d
          const T* xr = xp + b * cls * d + j;
          bool vectorised = false;
          if constexpr (std::is_same_v<T, float>) {
            if (d == 1) {  // contiguous classes
              for (int64_t k = 0; k < cls; ++k) row[k] = xr[k] - lj;
              exp_f32(row, row, cls);
              for (int64_t k = 0; k < cls; ++k) row[k] *= pj;
              vectorised = true;
            }
          }
          if (!vectorised)
            for (int64_t k = 0; k < cls; ++k) row[k * d] = pj * std::exp(xr[k * d] - lj);
          int64_t t = target[size_t(b * d + j)];
          if (t >= 0 && t < cls) row[t * d] -= pj;  // an ignored target has per 0
        }
    });
  });
}

// The per-element losses (N, d...), and the log-probabilities when they are not an output (N, C, d...), or for rows
// only the log-sum-exp of each (N).
Dim loss_scratch(const ops::Op& op, ops::InferCtx& s) {
  const auto& a = attrs_of<LossAttrs>(op);
  Shape per = s.shape(0);
  per.erase(per.begin() + 1);
  Dim n = shape_numel(per);
  const auto& outs = s.node().outputs;
  const bool log_probs_wanted = outs.size() >= 2 && outs[1];
  if (rows_only(a, s.dtype(0), s.rank(0), log_probs_wanted))
    n = n + s.shape(0)[0];  // each row's log-sum-exp
  else if (a.softmax && !log_probs_wanted)
    n = n + shape_numel(s.shape(0));
  return n * Dim(int64_t(dtype_size(s.dtype(0))));
}

const bool kRegistered = register_kernels(
    kCpu, {
              in_float32({"", "NegativeLogLikelihoodLoss", kernel(loss), loss_scratch}),
              in_float32({"", "SoftmaxCrossEntropyLoss", kernel(loss), loss_scratch}),
              in_float32({"com.onnxtrain", "SoftmaxCrossEntropyLossGrad", kernel(softmax_cross_entropy_grad)}),
          });

}  // namespace
}  // namespace onnxtrain::kernels
