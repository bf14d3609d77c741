// LayerNormalization and its gradient on the GPU: a block per row for the statistics, the output and dX (sums by
// block_reduce.cuh's reduction, in float32); dscale and dbias by columns, each block summing 32 columns over all rows.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, T* mean_out, T* rstd_out, int64_t n,
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
  T* yr = y + r * n;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    float o = (to_float(xr[j]) - mean) * rstd * to_float(w[j % nw]);
    if (b) o += to_float(b[j % nb]);
    yr[j] = from_float<T>(o);
  }
  if (threadIdx.x != 0) return;
  if (mean_out) mean_out[r] = from_float<T>(mean);
  if (rstd_out) rstd_out[r] = from_float<T>(rstd);
}

template <typename T>
__global__ void layer_norm_dx_kernel(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                                     int64_t n) {
  __shared__ BlockReduce::TempStorage tmp;
  __shared__ float shared;
  const int64_t r = blockIdx.x;
  const T *dr = dy + r * n, *xr = x + r * n;
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
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float xhat = (to_float(xr[j]) - m) * rs;
    o[j] = from_float<T>(rs * (to_float(dr[j]) * to_float(w[j]) - m1 - xhat * m2));
  }
}

constexpr int kColumns = 32, kRowLanes = kThreads / kColumns;

template <typename T>
__global__ void layer_norm_dw_kernel(const T* dy, const T* x, const T* mean, const T* rstd, T* dw, T* db,
                                     int64_t rows, int64_t n) {
  __shared__ float sw[kRowLanes][kColumns + 1], sb[kRowLanes][kColumns + 1];
  const int tx = threadIdx.x % kColumns, ty = threadIdx.x / kColumns;
  const int64_t j = int64_t(blockIdx.x) * kColumns + tx;
  float aw = 0, ab = 0;
  if (j < n)
    for (int64_t r = ty; r < rows; r += kRowLanes) {
      const float d = to_float(dy[r * n + j]);
      aw += d * (to_float(x[r * n + j]) - to_float(mean[r])) * to_float(rstd[r]);
      ab += d;
    }
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty != 0 || j >= n) return;
  for (int k = 1; k < kRowLanes; ++k) aw += sw[k][tx], ab += sb[k][tx];
  if (dw) dw[j] = from_float<T>(aw);
  if (db) db[j] = from_float<T>(ab);
}

}  // namespace

void layer_norm(DType t, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd, int64_t rows,
                int64_t n, int64_t nw, int64_t nb, float epsilon, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  check_rows(rows, "LayerNormalization");
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    layer_norm_kernel<<<unsigned(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y),
        static_cast<T*>(mean), static_cast<T*>(rstd), n, nw, nb, epsilon);
  });
  if (!ok) unsupported_dtype("LayerNormalization", t);
  check_launch("LayerNormalization");
}

void layer_norm_grad(DType t, const void* dy, const void* x, const void* w, const void* mean, const void* rstd,
                     void* dx, void* dw, void* db, int64_t rows, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  check_rows(rows, "LayerNormalizationGrad");
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    const T *d = static_cast<const T*>(dy), *xp = static_cast<const T*>(x), *m = static_cast<const T*>(mean),
            *rs = static_cast<const T*>(rstd);
    if (dx && rows)
      layer_norm_dx_kernel<<<unsigned(rows), kThreads, 0, stream>>>(d, xp, static_cast<const T*>(w), m, rs,
                                                                     static_cast<T*>(dx), n);
    if (dw || db)
      layer_norm_dw_kernel<<<unsigned((n + kColumns - 1) / kColumns), kThreads, 0, stream>>>(
          d, xp, m, rs, static_cast<T*>(dw), static_cast<T*>(db), rows, n);
  });
  if (!ok) unsupported_dtype("LayerNormalizationGrad", t);
  check_launch("LayerNormalizationGrad");
}

}  // namespace onnxtrain::kernels::cuda
