// LayerNormalization's kernels and its gradient's (normalization.cu launches them): a warp per row, or a block per
// row for longer ones (norm_rows.cuh), for the statistics, the output and dX (sums in float32); dscale and dbias by
// columns over chunks of the rows (column_chunks.cuh). Y (and so dY) of X's dtype T, or Y of 16 bits beside a float32
// X (com.onnxtrain's attribute `to`). In a header so that the tests' warp emulation runs them on the host.
#pragma once
#include "kernels/cuda/column_chunks.cuh"
#include "kernels/cuda/norm_rows.cuh"
#include "kernels/cuda/plus_base.cuh"

namespace onnxtrain::kernels::cuda {

// The scale's (or bias's) element for column j of a row of n, the scale's nw elements repeating along the row.
__device__ __forceinline__ int repeated(int j, int n, int nw) { return nw == n ? j : j % nw; }

template <typename Rows, typename T, typename Y>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, Y* y, T* mean_out, T* rstd_out, int64_t rows,
                                  int n, int nw, int nb, float epsilon) {
  const int64_t r = Rows::row();
  if (r >= rows) return;  // (a warp's, past the last row: no barrier waits for it)
  const T* xr = x + r * n;
  float s = 0;
  for (int j = Rows::first(); j < n; j += Rows::kStride) s += to_float(xr[j]);
  const float mean = Rows::sum(s) / float(n);
  float v = 0;
  for (int j = Rows::first(); j < n; j += Rows::kStride) {
    const float d = to_float(xr[j]) - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(Rows::sum(v) / float(n) + epsilon);
  Y* yr = y + r * n;
  for (int j = Rows::first(); j < n; j += Rows::kStride) {
    float o = (to_float(xr[j]) - mean) * rstd * to_float(w[repeated(j, n, nw)]);
    if (b) o += to_float(b[repeated(j, n, nb)]);
    yr[j] = from_float<Y>(o);
  }
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
  float s1 = 0, s2 = 0;
  for (int j = Rows::first(); j < n; j += Rows::kStride) {
    const float g = to_float(dr[j]) * to_float(w[j]);
    s1 += g;
    s2 += g * (to_float(xr[j]) - m) * rs;
  }
  const float m1 = Rows::sum(s1) / float(n);
  const float m2 = Rows::sum(s2) / float(n);
  T* o = dx + r * n;
  const T* br = base ? base + r * n : nullptr;
  for (int j = Rows::first(); j < n; j += Rows::kStride) {
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

}  // namespace onnxtrain::kernels::cuda
