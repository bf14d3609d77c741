#include "kernels/cpu/norm_gradient_rows.h"

#include <algorithm>
#include <type_traits>

#include "core/cpu_features.h"
#include "core/parallel.h"
#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/in_float32.h"

namespace onnxtrain::kernels::norm_gradient {
namespace {

// The partial column sums of one block of rows: dscale's, then dbias's where wanted.
template <typename T>
struct Partials {
  T *scale, *bias;
};

// One row, an element at a time (float64, and CPUs without AVX-512): the row's sums in double.
template <typename T, typename D>
void row_in_order(const Rows<T, D>& r, int64_t i, const Partials<T>& p) {
  const D* d = r.dy + i * r.n;
  const T* x = r.x + i * r.n;
  const T m = r.mean ? r.mean[i] : T(0), rs = r.rstd[i];
  double s1 = 0, s2 = 0;
  for (int64_t j = 0; j < r.n; ++j) {
    const T dj = T(d[j]), xhat = (x[j] - m) * rs, g = dj * r.scale[j];
    s1 += double(g);
    s2 += double(g * xhat);
    if (p.scale) p.scale[j] += dj * xhat;
    if (p.bias) p.bias[j] += dj;
  }
  if (!r.dx) return;
  const T m1 = r.mean ? T(s1 / double(r.n)) : T(0), m2 = T(s2 / double(r.n));
  const T* base = r.base ? r.base + i * r.n : nullptr;
  T* o = r.dx + i * r.n;
  for (int64_t j = 0; j < r.n; ++j) {  // (dX may be written in base's place, or in dY's or x's)
    const T xhat = (x[j] - m) * rs, v = rs * (T(d[j]) * r.scale[j] - m1 - xhat * m2);
    o[j] = base ? base[j] + v : v;
  }
}

template <typename D>
ONNXTRAIN_AVX512 __m512 load16(const D* p, __mmask16 k) {
  if constexpr (std::is_same_v<D, float>)
    return _mm512_maskz_loadu_ps(k, p);
  else
    return load_bf16(p, k);
}

// One float32 row, sixteen elements at a time (a row's last ones under a mask): the row's sums in float32 lanes
// for 256 elements, then in double.
template <typename D>
ONNXTRAIN_AVX512 void row_avx512(const Rows<float, D>& r, int64_t i, const Partials<float>& p) {
  const D* d = r.dy + i * r.n;
  const float* x = r.x + i * r.n;
  const __m512 m = _mm512_set1_ps(r.mean ? r.mean[i] : 0.f), rs = _mm512_set1_ps(r.rstd[i]);
  double s1 = 0, s2 = 0;
  for (int64_t j0 = 0; j0 < r.n; j0 += 256) {
    __m512 a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps();
    for (int64_t j = j0; j < std::min(r.n, j0 + 256); j += 16) {
      const __mmask16 k = first_lanes(r.n - j);
      const __m512 dj = load16(d + j, k), xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), m), rs);
      const __m512 g = _mm512_mul_ps(dj, _mm512_maskz_loadu_ps(k, r.scale + j));
      a1 = _mm512_add_ps(a1, g);
      a2 = _mm512_fmadd_ps(g, xhat, a2);
      if (p.scale)
        _mm512_mask_storeu_ps(p.scale + j, k, _mm512_fmadd_ps(dj, xhat, _mm512_maskz_loadu_ps(k, p.scale + j)));
      if (p.bias) _mm512_mask_storeu_ps(p.bias + j, k, _mm512_add_ps(dj, _mm512_maskz_loadu_ps(k, p.bias + j)));
    }
    s1 += double(_mm512_reduce_add_ps(a1));
    s2 += double(_mm512_reduce_add_ps(a2));
  }
  if (!r.dx) return;
  const __m512 m1 = _mm512_set1_ps(r.mean ? float(s1 / double(r.n)) : 0.f);
  const __m512 m2 = _mm512_set1_ps(float(s2 / double(r.n)));
  const float* base = r.base ? r.base + i * r.n : nullptr;
  float* o = r.dx + i * r.n;
  for (int64_t j = 0; j < r.n; j += 16) {
    const __mmask16 k = first_lanes(r.n - j);
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), m), rs);
    const __m512 g = _mm512_mul_ps(load16(d + j, k), _mm512_maskz_loadu_ps(k, r.scale + j));
    // (rounded before base is added, as an Add after it would: built with -ffp-contract=off)
    __m512 v = _mm512_mul_ps(rs, _mm512_fnmadd_ps(xhat, m2, _mm512_sub_ps(g, m1)));
    if (base) v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, base + j), v);
    _mm512_mask_storeu_ps(o + j, k, v);
  }
}

}  // namespace

Dim scratch(const ops::Op&, ops::InferCtx& s) {  // (blocks of rows) x 2n >= ceil(numel / kBlockRows) + n, twice
  const Dim n = shape_numel(s.shape(2));
  return (Dim::ceil_div(shape_numel(s.shape(1)), Dim(kBlockRows)) + n) * Dim(2 * int64_t(dtype_size(s.dtype(1))));
}

bool takes_as_is(ops::InferCtx& s) { return float32_but_one_bf16(s, 0, -1); }

template <typename T, typename D>
void run(const Rows<T, D>& r, T* partials) {
  const int64_t blocks = (r.rows + kBlockRows - 1) / kBlockRows, columns = r.dbias ? 2 * r.n : r.n;
  const bool sums = r.dscale || r.dbias;
  bool lanes = false;
  if constexpr (std::is_same_v<T, float>) lanes = cpu::features().avx512;
  parallel_for(blocks, kBlockRows * r.n * 8, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      Partials<T> p{nullptr, nullptr};
      if (sums) {
        T* block = partials + b * columns;
        std::fill(block, block + columns, T(0));
        p = {r.dscale ? block : nullptr, r.dbias ? block + (r.dscale ? r.n : 0) : nullptr};
      }
      for (int64_t i = b * kBlockRows; i < std::min(r.rows, (b + 1) * kBlockRows); ++i) {
        if constexpr (std::is_same_v<T, float>) {
          if (lanes) {
            row_avx512(r, i, p);
            continue;
          }
        }
        row_in_order(r, i, p);
      }
    }
  });
  if (!sums) return;
  parallel_for(r.n, blocks * 4, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      double s = 0, t = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const T* block = partials + b * columns;
        if (r.dscale) s += double(block[j]);
        if (r.dbias) t += double(block[(r.dscale ? r.n : 0) + j]);
      }
      if (r.dscale) r.dscale[j] = T(s);
      if (r.dbias) r.dbias[j] = T(t);
    }
  });
}

template void run<float, float>(const Rows<float, float>&, float*);
template void run<float, BFloat16>(const Rows<float, BFloat16>&, float*);
template void run<double, double>(const Rows<double, double>&, double*);

}  // namespace onnxtrain::kernels::norm_gradient
