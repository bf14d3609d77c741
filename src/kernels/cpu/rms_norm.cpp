// com.onnxtrain.RMSNormalization and its gradient over rows of n elements (the dims from the axis on): statistics
// accumulated in double; bfloat16 and float16 through float32 copies (in_float32), so that a bf16 model's norm
// keeps float32 statistics as PyTorch's does.
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"
#include "ops/normalization.h"

namespace onnxtrain::kernels {
namespace {

struct Rows {
  int64_t rows, n;
};

Rows rows_of(const ops::NormAttrs& at, const KernelCtx& c, const Tensor& x, const Tensor& scale) {
  int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  Rows r{1, 1};
  for (int64_t i = 0; i < x.rank(); ++i) (i < a ? r.rows : r.n) *= x.dims()[size_t(i)];
  if (scale.numel() != r.n)
    c.fail("scale " + dims_str(scale.dims()) + " does not hold one value for each of the " + std::to_string(r.n) +
           " normalized elements of " + dims_str(x.dims()));
  return r;
}

// sum(a[j] * b[j]) over n, accumulated in double.
template <typename T>
double dot(const T* a, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {  // the products a chunk at a time, summed in vector lanes
    alignas(32) float p[256];
    double s = 0;
    for (int64_t j0 = 0; j0 < n; j0 += 256) {
      int64_t len = std::min<int64_t>(256, n - j0);
      for (int64_t k = 0; k < len; ++k) p[k] = a[j0 + k] * b[j0 + k];
      s += sum_f32(p, len);
    }
    return s;
  } else {
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += double(a[j]) * double(b[j]);
    return s;
  }
}

void rms_norm(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &scale = c.in(1);
  Rows r = rows_of(at, c, x, scale);
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *xp = x.data<T>(), *w = scale.data<T>();
    T* y = c.out(0).data<T>();
    T* rstd_out = c.wants(1) ? c.out(1).data<T>() : nullptr;
    parallel_for(r.rows, r.n * 4, [&](int64_t rb, int64_t re) {
      for (int64_t i = rb; i < re; ++i) {
        const T* row = xp + i * r.n;
        const T rs = T(1.0 / std::sqrt(dot(row, row, r.n) / double(r.n) + double(at.epsilon)));
        T* yr = y + i * r.n;
        for (int64_t j = 0; j < r.n; ++j) yr[j] = row[j] * rs * w[j];
        if (rstd_out) rstd_out[i] = rs;
      }
    });
  });
}

// dX = rstd (dY scale - xhat mean(dY scale xhat)), xhat = X rstd, plus input 4 (base) where given (add_base); dscale =
// sum over rows of dY xhat (in double, in the scratch, columns split over threads).
void rms_norm_grad(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1), &scale = c.in(2), &rstd = c.in(3);
  Rows r = rows_of(at, c, x, scale);
  if (dy.numel() != x.numel() || rstd.numel() != r.rows)
    c.fail("dY " + dims_str(dy.dims()) + ", X " + dims_str(x.dims()) + " and the statistic " +
           dims_str(rstd.dims()) + " do not fit together");
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *d = dy.data<T>(), *xp = x.data<T>(), *w = scale.data<T>(), *rs = rstd.data<T>();
    if (c.wants(0)) {
      T* dx = c.out(0).data<T>();
      const T* base = c.has(4) ? c.in(4).data<T>() : nullptr;
      if (base && c.in(4).numel() != x.numel()) c.fail("base " + dims_str(c.in(4).dims()) + " must be X's shape");
      parallel_for(r.rows, r.n * 8, [&](int64_t rb, int64_t re) {
        std::vector<T> row(base ? size_t(r.n) : 0);  // (dX before base is added: dX's place may be base's)
        for (int64_t i = rb; i < re; ++i) {
          const T *dr = d + i * r.n, *xr = xp + i * r.n;
          T* o = base ? row.data() : dx + i * r.n;
          for (int64_t j = 0; j < r.n; ++j) o[j] = dr[j] * w[j];  // g, then dX in its place
          const T k = T(dot(o, xr, r.n) / double(r.n) * double(rs[i]) * double(rs[i]));  // mean(g xhat) / rstd
          for (int64_t j = 0; j < r.n; ++j) o[j] = rs[i] * (o[j] - xr[j] * k);
          if (base) add_base(base + i * r.n, o, dx + i * r.n, r.n);
        }
      });
    }
    if (!c.wants(1)) return;
    double* sums = c.scratch_as<double>(0, size_t(r.n));
    std::fill(sums, sums + r.n, 0.0);
    parallel_for(r.n, r.rows * 4, [&](int64_t jb, int64_t je) {  // columns split over threads, rows walked in order
      for (int64_t i = 0; i < r.rows; ++i) {
        const T *dr = d + i * r.n, *xr = xp + i * r.n;
        for (int64_t j = jb; j < je; ++j) sums[j] += double(dr[j] * (xr[j] * rs[i]));
      }
    });
    T* dw = c.out(1).data<T>();
    for (int64_t j = 0; j < r.n; ++j) dw[j] = T(sums[j]);
  });
}

const bool kRegistered = register_kernels(
    kCpu, {
              in_float32({"com.onnxtrain", "RMSNormalization", kernel(rms_norm)}),
              in_float32({"com.onnxtrain", "RMSNormalizationGrad", kernel(rms_norm_grad),
                          [](const ops::Op&, ops::InferCtx& s) { return shape_numel(s.shape(2)) * Dim(8); }}),
          });

}  // namespace
}  // namespace onnxtrain::kernels
