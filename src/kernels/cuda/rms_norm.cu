// com.onnxtrain.RMSNormalization and its gradient on the GPU: the launches of rms_norm_kernels.cuh's kernels, and of
// column_chunks.cuh's sum of dscale's partial sums.
#include "kernels/cuda/rms_norm_kernels.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {

void rms_norm(DType t, DType yt, const void* x, const void* w, void* y, void* rstd, int64_t rows, int64_t n,
              float epsilon, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  bool ok = with_float_pair(t, yt, [&](auto v, auto yv) {
    using T = decltype(v);
    using Y = decltype(yv);
    launch_norm_rows(rows, n, "RMSNormalization", [&](auto rows_policy, unsigned blocks) {
      rms_norm_kernel<decltype(rows_policy)><<<blocks, kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(w), static_cast<Y*>(y), static_cast<T*>(rstd), rows,
          int(n), epsilon);
    });
  });
  if (!ok) unsupported_dtype("RMSNormalization", yt);
  check_launch("RMSNormalization");
}

void rms_norm_grad(DType t, DType dt, const void* dy, const void* x, const void* w, const void* rstd,
                   const void* base, void* dx, void* dw, int64_t rows, int64_t n, float* partial,
                   cudaStream_t stream) {
  if (n == 0) return;
  bool ok = with_float_pair(t, dt, [&](auto v, auto dv) {
    using T = decltype(v);
    using D = decltype(dv);
    const D* d = static_cast<const D*>(dy);
    const T *xp = static_cast<const T*>(x), *rs = static_cast<const T*>(rstd);
    if (dx && rows)
      launch_norm_rows(rows, n, "RMSNormalizationGrad", [&](auto rows_policy, unsigned blocks) {
        rms_norm_dx_kernel<decltype(rows_policy)><<<blocks, kThreads, 0, stream>>>(
            d, xp, static_cast<const T*>(w), rs, static_cast<const T*>(base), static_cast<T*>(dx), rows, int(n));
      });
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
