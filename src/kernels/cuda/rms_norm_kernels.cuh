// com.onnxtrain.RMSNormalization's kernels and its gradient's (rms_norm.cu launches them), as LayerNormalization's
// (layer_norm_kernels.cuh): a warp or a block per row (norm_rows.cuh) for the statistic, the output and dX; dscale by
// columns over chunks of the rows. Y (and so dY) of X's dtype T, or of 16 bits beside a float32 X. In a header so
// that the tests' warp emulation runs them on the host.
#pragma once
#include "kernels/cuda/column_chunks.cuh"
#include "kernels/cuda/norm_rows.cuh"
#include "kernels/cuda/plus_base.cuh"

namespace onnxtrain::kernels::cuda {

template <typename Rows, typename T, typename Y>
__global__ void rms_norm_kernel(const T* x, const T* w, Y* y, T* rstd_out, int64_t rows, int n, float epsilon) {
  const int64_t r = Rows::row();
  if (r >= rows) return;  // (a warp's, past the last row: no barrier waits for it)
  const T* xr = x + r * n;
  float s = 0;
  for (int j = Rows::first(); j < n; j += Rows::kStride) {
    const float v = to_float(xr[j]);
    s += v * v;
  }
  const float rstd = rsqrtf(Rows::sum(s) / float(n) + epsilon);
  Y* yr = y + r * n;
  for (int j = Rows::first(); j < n; j += Rows::kStride) yr[j] = from_float<Y>(to_float(xr[j]) * rstd * to_float(w[j]));
  if (Rows::first() == 0 && rstd_out) rstd_out[r] = from_float<T>(rstd);
}

template <typename Rows, typename T, typename D>
__global__ void rms_norm_dx_kernel(const D* dy, const T* x, const T* w, const T* rstd, const T* base, T* dx,
                                   int64_t rows, int n) {
  const int64_t r = Rows::row();
  if (r >= rows) return;
  const D* dr = dy + r * n;
  const T* xr = x + r * n;
  const float rs = to_float(rstd[r]);
  float s = 0;
  for (int j = Rows::first(); j < n; j += Rows::kStride) s += to_float(dr[j]) * to_float(w[j]) * to_float(xr[j]);
  const float k = Rows::sum(s) / float(n) * rs * rs;
  T* o = dx + r * n;
  const T* br = base ? base + r * n : nullptr;
  for (int j = Rows::first(); j < n; j += Rows::kStride)
    o[j] = plus_base(br, j, rs * (to_float(dr[j]) * to_float(w[j]) - to_float(xr[j]) * k));
}

template <typename T, typename D>
__global__ void rms_norm_dw_kernel(const D* dy, const T* x, const T* rstd, float* partial, int64_t rows, int64_t n,
                                   int64_t per_chunk) {
  __shared__ float lanes[kRowLanes][kColumns + 1];
  const ChunkSpan s = chunk_span(rows, per_chunk);
  float a = 0;
  if (s.j < n)
    for (int64_t r = s.begin + s.ty; r < s.end; r += kRowLanes)
      a += to_float(dy[r * n + s.j]) * to_float(x[r * n + s.j]) * to_float(rstd[r]);
  write_partial(a, s, lanes, partial, n);
}

}  // namespace onnxtrain::kernels::cuda
