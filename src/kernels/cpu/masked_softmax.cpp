// com.onnxtrain.MaskedSoftmax, its gradient MaskedSoftmaxGrad, and AttentionSoftmax (the scores' product computed
// only for the columns some row of a 32-row tile leaves unmasked, then the masked softmax).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/attention_band.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

constexpr int64_t kTileRows = 32;

// y = MaskedSoftmax(x, scale, cond, fill) over the last axis (y may be x).
void masked_softmax(const KernelCtx& c, const Tensor& x, const Tensor& scale_t, const Tensor& cond,
                    const Tensor& fill_t, Tensor& out) {
  if (scale_t.numel() != 1 || fill_t.numel() != 1) c.fail("scale and fill must be scalars");
  std::vector<int64_t> bd;
  if (!broadcast_dims(x.dims(), cond.dims(), &bd) || bd != x.dims())
    c.fail("cond " + dims_str(cond.dims()) + " does not broadcast to the scores " + dims_str(x.dims()));
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *xp = x.data<T>(), scale = scale_t.data<T>()[0], fill = fill_t.data<T>()[0];
    const bool* cp = cond.data<bool>();
    T* y = out.data<T>();
    broadcast_rows<2>(x.dims(), {&x.dims(), &cond.dims()}, [&](int64_t o, auto off, auto st, int64_t n) {
      T* row = y + o;
      const T* xr = xp + off[0];
      const bool* cr = cp + off[1];
      if constexpr (std::is_same_v<T, float>) {
        if (st[0] == 1 && st[1] == 1) return masked_softmax_f32(xr, cr, scale, fill, row, n);  // the usual case
        for (int64_t k = 0; k < n; ++k) row[k] = cr[k * st[1]] ? fill : xr[k * st[0]] * scale;
        softmax_f32(row, row, n);
      } else {
        T m = -INFINITY, sum = 0;
        for (int64_t k = 0; k < n; ++k) m = std::max(m, row[k] = cr[k * st[1]] ? fill : xr[k * st[0]] * scale);
        for (int64_t k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - m));
        for (int64_t k = 0; k < n; ++k) row[k] /= sum;
      }
    });
  });
}

void masked_softmax_kernel(KernelCtx& c) { masked_softmax(c, c.in(0), c.in(1), c.in(2), c.in(3), c.out(0)); }

void masked_softmax_grad(KernelCtx& c) {
  const Tensor &dY = c.in(0), &Y = c.in(1), &cond = c.in(3);
  if (dY.dims() != Y.dims()) c.fail("dY " + dims_str(dY.dims()) + " and Y " + dims_str(Y.dims()) + " differ");
  if (c.in(2).numel() != 1) c.fail("scale must be a scalar");
  std::vector<int64_t> bd;
  if (!broadcast_dims(Y.dims(), cond.dims(), &bd) || bd != Y.dims())
    c.fail("cond " + dims_str(cond.dims()) + " does not broadcast to Y " + dims_str(Y.dims()));
  dispatch<kWideFloats>(Y.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *dy = dY.data<T>(), *y = Y.data<T>(), scale = c.in(2).data<T>()[0];
    const bool* cp = cond.data<bool>();
    T* dx = c.out(0).data<T>();
    broadcast_rows<1>(Y.dims(), {&cond.dims()}, [&](int64_t o, auto off, auto st, int64_t n) {
      const T *dr = dy + o, *yr = y + o;
      const bool* cr = cp + off[0];
      if constexpr (std::is_same_v<T, float>) {
        if (st[0] == 1) return masked_softmax_grad_f32(dr, yr, cr, scale, dx + o, n);
      }
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += double(dr[k]) * double(yr[k]);
      const T s = T(dot);
      for (int64_t k = 0; k < n; ++k) dx[o + k] = cr[k * st[0]] ? T(0) : yr[k] * (dr[k] - s) * scale;
    });
  });
}

void attention_softmax(KernelCtx& c) {
  const Tensor &A = c.in(0), &B = c.in(1), &cond = c.in(3);
  Tensor& out = c.out(0);
  const std::vector<int64_t>& od = out.dims();
  const size_t rank = od.size();
  const int64_t m = od[rank - 2], n = od[rank - 1], k = A.dims().back();
  if (B.dims()[B.rank() - 2] != k) c.fail("inner dims differ: " + dims_str(A.dims()) + " x " + dims_str(B.dims()));
  std::vector<int64_t> batch(od.begin(), od.end() - 2), ab(A.dims().begin(), A.dims().end() - 2),
      bb(B.dims().begin(), B.dims().end() - 2);
  std::vector<int64_t> cbd;
  if (!broadcast_dims(od, cond.dims(), &cbd) || cbd != od)
    c.fail("cond " + dims_str(cond.dims()) + " does not broadcast to the scores " + dims_str(od));
  auto sa = broadcast_strides(ab, batch), sb = broadcast_strides(bb, batch);
  auto sc = broadcast_strides(cond.dims(), od);
  const bool banded = sc[rank - 1] == 1;  // (a mask broadcast along the columns: every column computed)
  const int64_t nb = numel_of(batch);
  dispatch<kWideFloats>(A.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *a = A.data<T>(), *b = B.data<T>();
    T* o = out.data<T>();
    parallel_for(nb, m * n * k, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        auto [oa, ob, oc] = broadcast_offsets<3>(i, batch, {&sa, &sb, &sc});
        const T *ai = a + oa * m * k, *bi = b + ob * k * n;
        T* oi = o + i * m * n;
        for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
          int64_t mr = std::min(kTileRows, m - r0);
          auto [lo, hi, all_open] =
              banded ? open_band(cond.data<bool>() + oc, sc[rank - 2], r0, r0 + mr, n) : AttentionBand{0, n, true};
          for (int64_t r = r0; r < r0 + mr; ++r) {  // (masked: what the product would put there is not read)
            std::fill(oi + r * n, oi + r * n + std::min(lo, n), T(0));
            if (hi > lo) std::fill(oi + r * n + hi, oi + (r + 1) * n, T(0));
          }
          if (hi > lo)
            gemm<T>(false, false, mr, hi - lo, k, T(1), ai + r0 * k, k, bi + lo, n, T(0), oi + r0 * n + lo, n);
        }
      }
    });
  });
  masked_softmax(c, out, c.in(2), cond, c.in(4), out);
}

const bool kRegistered =
    register_kernels(kCpu, {
                               in_float32({"com.onnxtrain", "MaskedSoftmax", kernel(masked_softmax_kernel)}),
                               in_float32({"com.onnxtrain", "MaskedSoftmaxGrad", kernel(masked_softmax_grad)}),
                               in_float32({"com.onnxtrain", "AttentionSoftmax", kernel(attention_softmax)}),
                           });

}  // namespace
}  // namespace onnxtrain::kernels
