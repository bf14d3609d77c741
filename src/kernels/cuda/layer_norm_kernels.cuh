// LayerNormalization's kernels and its gradient's (normalization.cu launches them): a warp per row, or a block per
// row for longer ones (norm_rows.cuh), for the statistics, the output and dX (sums in float32); dscale and dbias by
// columns over chunks of the rows (column_chunks.cuh; 8 columns a thread where the rows allow). Y (and so dY) of X's
// dtype T, or Y of 16 bits beside a float32 X (com.onnxtrain's attribute `to`). In a header so that the tests' warp
// emulation runs them on the host.
#pragma once
#include "kernels/cuda/column_chunks.cuh"
#include "kernels/cuda/norm_rows.cuh"
#include "kernels/cuda/plus_base.cuh"

namespace onnxtrain::kernels::cuda {

// The scale's (or bias's) element for column j of a row of n, the scale's nw elements repeating along the row.
__device__ __forceinline__ int repeated(int j, int n, int nw) { return nw == n ? j : j % nw; }

// A thread's elements of a row held in registers between the passes over it (a warp's row of GPT-2's 768: 24 a lane);
// those past them are read again.
constexpr int kHeld = 24;

template <typename Rows, typename T, typename Y>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, Y* y, T* mean_out, T* rstd_out, int64_t rows,
                                  int n, int nw, int nb, float epsilon) {
  const int64_t r = Rows::row();
  if (r >= rows) return;  // (a warp's, past the last row: no barrier waits for it)
  const T* xr = x + r * n;
  const int rest = Rows::first() + kHeld * Rows::kStride;  // the first element not held
  float held[kHeld], s = 0;
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const int j = Rows::first() + i * Rows::kStride;
    held[i] = j < n ? to_float(xr[j]) : 0.f;
    s += held[i];
  }
  for (int j = rest; j < n; j += Rows::kStride) s += to_float(xr[j]);
  const float mean = Rows::sum(s) / float(n);
  float v = 0;
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const float d = Rows::first() + i * Rows::kStride < n ? held[i] - mean : 0.f;
    v += d * d;
  }
  for (int j = rest; j < n; j += Rows::kStride) {
    const float d = to_float(xr[j]) - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(Rows::sum(v) / float(n) + epsilon);
  Y* yr = y + r * n;
  auto out = [&](int j, float xj) {
    float o = (xj - mean) * rstd * to_float(w[repeated(j, n, nw)]);
    if (b) o += to_float(b[repeated(j, n, nb)]);
    yr[j] = from_float<Y>(o);
  };
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const int j = Rows::first() + i * Rows::kStride;
    if (j < n) out(j, held[i]);
  }
  for (int j = rest; j < n; j += Rows::kStride) out(j, to_float(xr[j]));
  if (Rows::first() != 0) return;
  if (mean_out) mean_out[r] = from_float<T>(mean);
  if (rstd_out) rstd_out[r] = from_float<T>(rstd);
}

// dx, plus base where given (dx may be base), the sum rounded as an Add of the two would round it.
template <typename Rows, typename T, typename D>
__global__ void layer_norm_dx_kernel(const D* dy, const T* x, const T* w, const T* mean, const T* rstd,
                                     const T* base, T* dx, int64_t rows, int n) {
  const int64_t r = Rows::row();
  if (r >= rows) return;
  const D* dr = dy + r * n;
  const T* xr = x + r * n;
  const float m = to_float(mean[r]), rs = to_float(rstd[r]);
  const int rest = Rows::first() + kHeld * Rows::kStride;
  float g[kHeld], d[kHeld], s1 = 0, s2 = 0;  // dy w and x - mean of the elements held
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const int j = Rows::first() + i * Rows::kStride;
    g[i] = j < n ? to_float(dr[j]) * to_float(w[j]) : 0.f;
    d[i] = j < n ? to_float(xr[j]) - m : 0.f;
    s1 += g[i];
    s2 += g[i] * d[i] * rs;
  }
  for (int j = rest; j < n; j += Rows::kStride) {
    const float gj = to_float(dr[j]) * to_float(w[j]);
    s1 += gj;
    s2 += gj * (to_float(xr[j]) - m) * rs;
  }
  const float m1 = Rows::sum(s1) / float(n);
  const float m2 = Rows::sum(s2) / float(n);
  T* o = dx + r * n;
  const T* br = base ? base + r * n : nullptr;
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const int j = Rows::first() + i * Rows::kStride;
    if (j < n) o[j] = plus_base(br, j, rs * (g[i] - m1 - d[i] * rs * m2));
  }
  for (int j = rest; j < n; j += Rows::kStride) {
    const float xhat = (to_float(xr[j]) - m) * rs;
    o[j] = plus_base(br, j, rs * (to_float(dr[j]) * to_float(w[j]) - m1 - xhat * m2));
  }
}

template <typename T, typename D>
__global__ void layer_norm_dw_kernel(const D* dy, const T* x, const T* mean, const T* rstd, float* partial_w,
                                     float* partial_b, int64_t rows, int64_t n, int64_t per_chunk) {
  __shared__ float lanes_w[kRowLanes][kColumns + 1], lanes_b[kRowLanes][kColumns + 1];
  const ChunkSpan s = chunk_span(rows, per_chunk);
  float aw = 0, ab = 0;
  if (s.j < n)
    for (int64_t r = s.begin + s.ty; r < s.end; r += kRowLanes) {
      const float d = to_float(dy[r * n + s.j]);
      aw += d * (to_float(x[r * n + s.j]) - to_float(mean[r])) * to_float(rstd[r]);
      ab += d;
    }
  write_partial(aw, s, lanes_w, partial_w, n);
  write_partial(ab, s, lanes_b, partial_b, n);
}

// layer_norm_dw_kernel's partial sums, wide (column_chunks.cuh: 8 columns a thread, the same bits), where n is a
// multiple of 8 and dy and x align to packs of 8.
template <typename T, typename D>
__global__ void layer_norm_dw_wide_kernel(const D* dy, const T* x, const T* mean, const T* rstd, float* partial_w,
                                          float* partial_b, int64_t rows, int64_t n, int64_t per_chunk) {
  __shared__ WideLanes lanes_w, lanes_b;
  const ChunkSpan s = wide_span(rows, per_chunk);
  float aw[kWideColumns] = {}, ab[kWideColumns] = {};
  if (s.j < n)
    for (int64_t r = s.begin + s.ty; r < s.end; r += kRowLanes) {
      const Pack<D, kWideColumns> d = *reinterpret_cast<const Pack<D, kWideColumns>*>(dy + r * n + s.j);
      const Pack<T, kWideColumns> xs = *reinterpret_cast<const Pack<T, kWideColumns>*>(x + r * n + s.j);
      const float m = to_float(mean[r]), rs = to_float(rstd[r]);
#pragma unroll
      for (int k = 0; k < kWideColumns; ++k) {
        const float dk = to_float(d.at[k]);
        aw[k] += dk * (to_float(xs.at[k]) - m) * rs;
        ab[k] += dk;
      }
    }
  write_wide_partials(aw, s, lanes_w, partial_w, n);
  write_wide_partials(ab, s, lanes_b, partial_b, n);
}

}  // namespace onnxtrain::kernels::cuda
