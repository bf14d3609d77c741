// com.onnxtrain.RMSNormalization and its gradient over rows of n elements (the dims from the axis on): statistics
// accumulated in double; bfloat16 and float16 through float32 copies (in_float32), so that a bf16 model's norm
// keeps float32 statistics as PyTorch's does (but for autocast's bf16 dY into a float32 norm's gradient: read as it
// is).
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/norm_gradient_rows.h"
#include "kernels/cpu/norm_output_rows.h"
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
    T* rstd_out = c.wants(1) ? c.out(1).data<T>() : nullptr;
    parallel_for(r.rows, r.n * 4, [&](int64_t rb, int64_t re) {
      for (int64_t i = rb; i < re; ++i) {
        const T* row = xp + i * r.n;
        const T rs = T(1.0 / std::sqrt(dot(row, row, r.n) / double(r.n) + double(at.epsilon)));
        if constexpr (std::is_same_v<T, float>) {
          norm_output_row(row, 0.f, rs, w, nullptr, c.out(0), i, r.n);  // (bf16 of attribute `to`, taken as it is)
        } else {
          T* yr = c.out(0).data<T>() + i * r.n;
          for (int64_t j = 0; j < r.n; ++j) yr[j] = row[j] * rs * w[j];
        }
        if (rstd_out) rstd_out[i] = rs;
      }
    });
  });
}

// com.onnxtrain.RMSNormalizationGrad: dY of X's type or, for a float32 X, bfloat16 (autocast's); base (input 4) added
// to dX where given (norm_gradient_rows.h).
void rms_norm_grad(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1), &scale = c.in(2), &rstd = c.in(3);
  Rows shape = rows_of(at, c, x, scale);
  if (dy.numel() != x.numel() || rstd.numel() != shape.rows)
    c.fail("dY " + dims_str(dy.dims()) + ", X " + dims_str(x.dims()) + " and the statistic " +
           dims_str(rstd.dims()) + " do not fit together");
  if (c.has(4) && c.in(4).numel() != x.numel()) c.fail("base " + dims_str(c.in(4).dims()) + " must be X's shape");
  auto run = [&](auto t, auto d) {
    using T = typename decltype(t)::type;
    using D = typename decltype(d)::type;
    norm_gradient::Rows<T, D> r;
    r.rows = shape.rows, r.n = shape.n, r.dy = dy.data<D>(), r.x = x.data<T>(), r.scale = scale.data<T>();
    r.rstd = rstd.data<T>(), r.base = c.has(4) ? c.in(4).data<T>() : nullptr;
    r.dx = c.wants(0) ? c.out(0).data<T>() : nullptr, r.dscale = c.wants(1) ? c.out(1).data<T>() : nullptr;
    norm_gradient::run(r, c.scratch_as<T>(0, size_t(norm_gradient::partials(shape.rows, shape.n))));
  };
  norm_gradient::dispatch(dy.dtype(), x.dtype(), c, run);
}

const bool kRegistered = register_kernels(
    kCpu, {
              in_float32({"com.onnxtrain", "RMSNormalization", kernel(rms_norm)}, float32_with_a_bf16_output),
              in_float32({"com.onnxtrain", "RMSNormalizationGrad", kernel(rms_norm_grad), norm_gradient::scratch},
                         norm_gradient::takes_as_is),
          });

}  // namespace
}  // namespace onnxtrain::kernels
