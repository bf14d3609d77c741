// LayerNormalization's kernels and its gradient's (normalization.cu launches them): a block per row for the
// statistics, the output and dX (sums by block_reduce.cuh's reduction, in float32); dscale and dbias by columns over
// chunks of the rows (column_chunks.cuh). Y (and so dY) of X's dtype T, or Y of 16 bits beside a float32 X
// (com.onnxtrain's attribute `to`). In a header so that the tests' warp emulation runs them on the host.
#pragma once
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/column_chunks.cuh"
#include "kernels/cuda/plus_base.cuh"

namespace onnxtrain::kernels::cuda {

template <typename T, typename Y>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, Y* y, T* mean_out, T* rstd_out, int64_t n,
                                  int64_t nw, int64_t nb, float epsilon) {
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * n;
  float s = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) s += to_float(xr[j]);
  const float mean = block_all_reduce(s, SumOp(), tmp, &shared) / float(n);
  float v = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float d = to_float(xr[j]) - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(block_all_reduce(v, SumOp(), tmp, &shared) / float(n) + epsilon);
  Y* yr = y + r * n;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    float o = (to_float(xr[j]) - mean) * rstd * to_float(w[j % nw]);
    if (b) o += to_float(b[j % nb]);
    yr[j] = from_float<Y>(o);
  }
  if (threadIdx.x != 0) return;
  if (mean_out) mean_out[r] = from_float<T>(mean);
  if (rstd_out) rstd_out[r] = from_float<T>(rstd);
}

// dx, plus base where given (dx may be base), the sum rounded as an Add of the two would round it.
template <typename T, typename D>
__global__ void layer_norm_dx_kernel(const D* dy, const T* x, const T* w, const T* mean, const T* rstd,
                                     const T* base, T* dx, int64_t n) {
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  const int64_t r = blockIdx.x;
  const D* dr = dy + r * n;
  const T* xr = x + r * n;
  const float m = to_float(mean[r]), rs = to_float(rstd[r]);
  float s1 = 0, s2 = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float g = to_float(dr[j]) * to_float(w[j]);
    s1 += g;
    s2 += g * (to_float(xr[j]) - m) * rs;
  }
  const float m1 = block_all_reduce(s1, SumOp(), tmp, &shared) / float(n);
  const float m2 = block_all_reduce(s2, SumOp(), tmp, &shared) / float(n);
  T* o = dx + r * n;
  const T* br = base ? base + r * n : nullptr;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
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
