// LayerNormalization, BatchNormalization (inference and training mode) and InstanceNormalization; statistics
// accumulated in double.
#include "ops/normalization.h"

#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/norm_gradient_rows.h"
#include "kernels/cpu/norm_output_rows.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

// Per-channel statistics over (N, spatial) of an (N, C, ...) tensor: input 0, with `params` per-channel inputs
// after it (checked to hold C values each).
struct ChannelView {
  int64_t n, c, spatial;
};
ChannelView channel_view(const KernelCtx& c, size_t params) {
  const Tensor& x = c.in(0);
  if (x.rank() == 0) c.fail("the input is a scalar, not (N, C, ...)");
  ChannelView v{x.dims()[0], x.rank() > 1 ? x.dims()[1] : 1, 1};
  for (int64_t i = 2; i < x.rank(); ++i) v.spatial *= x.dims()[size_t(i)];
  for (size_t i = 1; i <= params; ++i)
    if (c.in(i).numel() != v.c)
      c.fail("input " + std::to_string(i) + " " + dims_str(c.in(i).dims()) + " does not hold one value for each of " +
             std::to_string(v.c) + " channels");
  return v;
}

// x's n values repeated from its first `count` (a scale or bias broadcast over the normalized dims), in `keep`.
template <typename T>
const T* repeated(const T* x, int64_t count, int64_t n, std::vector<T>& keep) {
  keep.resize(size_t(n));
  for (int64_t j = 0; j < n; ++j) keep[size_t(j)] = x[j % count];
  return keep.data();
}

void layer_norm(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  int64_t rows = 1, n = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < a ? rows : n) *= x.dims()[size_t(i)];
  std::vector<int64_t> norm(x.dims().begin() + a, x.dims().end());
  for (size_t i : {1, 2})
    if (c.has(i) && !broadcasts_as_suffix(c.in(i).dims(), norm))
      c.fail(std::string(i == 1 ? "scale " : "bias ") + dims_str(c.in(i).dims()) +
             " does not broadcast over the normalized dims " + dims_str(norm));
  const int64_t nw = c.in(1).numel(), nb = c.has(2) ? c.in(2).numel() : 0;
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* w = c.in(1).data<T>();
    const T* b = c.has(2) ? c.in(2).data<T>() : nullptr;
    std::vector<T> ws, bs;  // scale and bias broadcast over the normalized dims, repeated to n values
    if (nw != n) w = repeated(w, nw, n, ws);
    if (b && nb != n) b = repeated(b, nb, n, bs);
    T* mean_out = c.wants(1) ? c.out(1).data<T>() : nullptr;
    T* rstd_out = c.wants(2) ? c.out(2).data<T>() : nullptr;
    parallel_for(rows, n * 4, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        const T* row = xp + r * n;
        double mean = 0, var = 0;
        if constexpr (std::is_same_v<T, float>) {
          mean_var_f32(row, n, &mean, &var);
        } else {
          for (int64_t j = 0; j < n; ++j) mean += row[j];
          mean /= double(n);
          for (int64_t j = 0; j < n; ++j) var += (row[j] - mean) * (row[j] - mean);
          var /= double(n);
        }
        double rstd = 1.0 / std::sqrt(var + double(at.epsilon));
        T m = T(mean), rs = T(rstd);
        if constexpr (std::is_same_v<T, float>) {
          norm_output_row(row, m, rs, w, b, c.out(0), r, n);  // (bf16 of attribute `to`, taken as it is)
        } else {
          T* yr = c.out(0).data<T>() + r * n;
          for (int64_t j = 0; j < n; ++j) yr[j] = (row[j] - m) * rs * w[j] + (b ? b[j] : T(0));
        }
        if (mean_out) mean_out[r] = m;
        if (rstd_out) rstd_out[r] = rs;
      }
    });
  });
}

void batch_norm(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  ChannelView v = channel_view(c, 4);
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *xp = x.data<T>(), *scale = c.in(1).data<T>(), *bias = c.in(2).data<T>();
    const T *rmean = c.in(3).data<T>(), *rvar = c.in(4).data<T>();
    T* y = c.out(0).data<T>();
    for (int64_t ch = 0; ch < v.c; ++ch) {
      double mean = rmean[ch], var = rvar[ch];
      if (at.training) {
        double s = 0, s2 = 0, cnt = double(v.n * v.spatial);
        for (int64_t b = 0; b < v.n; ++b)
          for (int64_t i = 0; i < v.spatial; ++i) s += xp[(b * v.c + ch) * v.spatial + i];
        mean = s / cnt;
        for (int64_t b = 0; b < v.n; ++b)
          for (int64_t i = 0; i < v.spatial; ++i) {
            double d = xp[(b * v.c + ch) * v.spatial + i] - mean;
            s2 += d * d;
          }
        var = s2 / cnt;
        if (c.wants(1)) c.out(1).data<T>()[ch] = T(rmean[ch] * at.momentum + mean * (1 - at.momentum));
        // ONNX updates running_var with the batch's population variance; PyTorch (the wrapper sets
        // the onnxtrain attribute unbiased_running_var) with the unbiased one.
        double run_var = at.unbiased && cnt > 1 ? var * cnt / (cnt - 1) : var;
        if (c.wants(2)) c.out(2).data<T>()[ch] = T(rvar[ch] * at.momentum + run_var * (1 - at.momentum));
        if (c.wants(3)) c.out(3).data<T>()[ch] = T(mean);  // opsets 7-13: the batch's own statistics
        if (c.wants(4)) c.out(4).data<T>()[ch] = T(var);
      }
      double k = scale[ch] / std::sqrt(var + at.epsilon), off = bias[ch] - mean * k;
      for (int64_t b = 0; b < v.n; ++b)
        for (int64_t i = 0; i < v.spatial; ++i) {
          int64_t idx = (b * v.c + ch) * v.spatial + i;
          y[idx] = T(xp[idx] * k + off);
        }
    }
  });
}

void instance_norm(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  ChannelView v = channel_view(c, 2);
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *xp = x.data<T>(), *scale = c.in(1).data<T>(), *bias = c.in(2).data<T>();
    T* y = c.out(0).data<T>();
    parallel_for(v.n * v.c, v.spatial * 4, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        int64_t ch = r % v.c;
        const T* row = xp + r * v.spatial;
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < v.spatial; ++i) s += row[i];
        double mean = s / double(v.spatial);
        for (int64_t i = 0; i < v.spatial; ++i) s2 += (row[i] - mean) * (row[i] - mean);
        double k = scale[ch] / std::sqrt(s2 / double(v.spatial) + at.epsilon);
        for (int64_t i = 0; i < v.spatial; ++i) y[r * v.spatial + i] = T((row[i] - mean) * k + bias[ch]);
      }
    });
  });
}

// com.onnxtrain.LayerNormalizationGrad: rows of x (rows, n) with their mean and rstd; scale (n); dY of x's type or,
// for a float32 x, bfloat16 (autocast's); base (input 5) added to dX where given (norm_gradient_rows.h).
void layer_norm_grad(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1);
  int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  int64_t rows = 1, n = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < a ? rows : n) *= x.dims()[size_t(i)];
  if (c.in(2).numel() != n || dy.numel() != x.numel() || c.in(3).numel() != rows || c.in(4).numel() != rows)
    c.fail("dy " + dims_str(dy.dims()) + ", x " + dims_str(x.dims()) + ", scale " + dims_str(c.in(2).dims()) +
           " and the statistics " + dims_str(c.in(3).dims()) + " do not fit together");
  if (c.has(5) && c.in(5).numel() != x.numel()) c.fail("base " + dims_str(c.in(5).dims()) + " must be x's shape");
  auto run = [&](auto t, auto d) {
    using T = typename decltype(t)::type;
    using D = typename decltype(d)::type;
    norm_gradient::Rows<T, D> r;
    r.rows = rows, r.n = n, r.dy = dy.data<D>(), r.x = x.data<T>(), r.scale = c.in(2).data<T>();
    r.mean = c.in(3).data<T>(), r.rstd = c.in(4).data<T>(), r.base = c.has(5) ? c.in(5).data<T>() : nullptr;
    r.dx = c.wants(0) ? c.out(0).data<T>() : nullptr;
    r.dscale = c.wants(1) ? c.out(1).data<T>() : nullptr, r.dbias = c.wants(2) ? c.out(2).data<T>() : nullptr;
    norm_gradient::run(r, c.scratch_as<T>(0, size_t(norm_gradient::partials(rows, n))));
  };
  norm_gradient::dispatch(dy.dtype(), x.dtype(), c, run);
}

const bool kRegistered = register_kernels(
    kCpu, {
              in_float32({"", "LayerNormalization", kernel(layer_norm)}),
              in_float32({"com.onnxtrain", "LayerNormalization", kernel(layer_norm)},  // (Y of attribute `to`)
                         float32_with_a_bf16_output),
              in_float32({"", "BatchNormalization", kernel(batch_norm)}),
              in_float32({"", "InstanceNormalization", kernel(instance_norm)}),
              in_float32({"com.onnxtrain", "LayerNormalizationGrad", kernel(layer_norm_grad), norm_gradient::scratch},
                         norm_gradient::takes_as_is),
          });

}  // namespace
}  // namespace onnxtrain::kernels
