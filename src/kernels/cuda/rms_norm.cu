// com.onnxtrain.RMSNormalization and its gradient on the GPU, as LayerNormalization's (normalization.cu): a block per
// row for the statistic, the output and dX (sums by block_reduce.cuh's reduction, in float32); dscale by columns over
// chunks of the rows (column_chunks.cuh). Y (and so dY) of X's dtype T, or of 16 bits beside a float32 X.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/column_chunks.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename T, typename Y>
__global__ void rms_norm_kernel(const T* x, const T* w, Y* y, T* rstd_out, int64_t n, float epsilon) {
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * n;
  float s = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float v = to_float(xr[j]);
    s += v * v;
  }
  const float rstd = rsqrtf(block_all_reduce(s, SumOp(), tmp, &shared) / float(n) + epsilon);
  Y* yr = y + r * n;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) yr[j] = from_float<Y>(to_float(xr[j]) * rstd * to_float(w[j]));
  if (threadIdx.x == 0 && rstd_out) rstd_out[r] = from_float<T>(rstd);
}

template <typename T, typename D>
__global__ void rms_norm_dx_kernel(const D* dy, const T* x, const T* w, const T* rstd, T* dx, int64_t n) {
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  const int64_t r = blockIdx.x;
  const D* dr = dy + r * n;
  const T* xr = x + r * n;
  const float rs = to_float(rstd[r]);
  float s = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) s += to_float(dr[j]) * to_float(w[j]) * to_float(xr[j]);
  const float k = block_all_reduce(s, SumOp(), tmp, &shared) / float(n) * rs * rs;
  T* o = dx + r * n;
  for (int64_t j = threadIdx.x; j < n; j += kThreads)
    o[j] = from_float<T>(rs * (to_float(dr[j]) * to_float(w[j]) - to_float(xr[j]) * k));
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

}  // namespace

void rms_norm(DType t, DType yt, const void* x, const void* w, void* y, void* rstd, int64_t rows, int64_t n,
              float epsilon, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  check_rows(rows, "RMSNormalization");
  bool ok = with_float_pair(t, yt, [&](auto v, auto yv) {
    using T = decltype(v);
    using Y = decltype(yv);
    rms_norm_kernel<<<unsigned(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                             static_cast<Y*>(y), static_cast<T*>(rstd), n, epsilon);
  });
  if (!ok) unsupported_dtype("RMSNormalization", yt);
  check_launch("RMSNormalization");
}

void rms_norm_grad(DType t, DType dt, const void* dy, const void* x, const void* w, const void* rstd, void* dx,
                   void* dw, int64_t rows, int64_t n, float* partial, cudaStream_t stream) {
  if (n == 0) return;
  check_rows(rows, "RMSNormalizationGrad");
  bool ok = with_float_pair(t, dt, [&](auto v, auto dv) {
    using T = decltype(v);
    using D = decltype(dv);
    const D* d = static_cast<const D*>(dy);
    const T *xp = static_cast<const T*>(x), *rs = static_cast<const T*>(rstd);
    if (dx && rows)
      rms_norm_dx_kernel<<<unsigned(rows), kThreads, 0, stream>>>(d, xp, static_cast<const T*>(w), rs,
                                                                  static_cast<T*>(dx), n);
    if (dw) {
      const Chunks ch = chunks_of(rows);
      rms_norm_dw_kernel<<<chunk_grid(n, ch), kThreads, 0, stream>>>(d, xp, rs, partial, rows, n, ch.rows);
      sum_chunks_kernel<<<blocks_for(n), kThreads, 0, stream>>>(partial, ch.count, n, 1.f, static_cast<T*>(dw));
    }
  });
  if (!ok) unsupported_dtype("RMSNormalizationGrad", dt);
  check_launch("RMSNormalizationGrad");
}

}  // namespace onnxtrain::kernels::cuda
