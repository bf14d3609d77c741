// LayerNormalization and its gradient on the GPU: the launches of layer_norm_kernels.cuh's kernels, and of
// column_chunks.cuh's sums of dscale's and dbias's partial sums.
#include "kernels/cuda/layer_norm_kernels.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {

void layer_norm(DType t, DType yt, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                int64_t rows, int64_t n, int64_t nw, int64_t nb, float epsilon, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  bool ok = with_float_pair(t, yt, [&](auto v, auto yv) {
    using T = decltype(v);
    using Y = decltype(yv);
    launch_norm_rows(rows, n, "LayerNormalization", [&](auto rows_policy, unsigned blocks) {
      layer_norm_kernel<decltype(rows_policy)><<<blocks, kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<Y*>(y),
          static_cast<T*>(mean), static_cast<T*>(rstd), rows, int(n), int(nw), int(nb), epsilon);
    });
  });
  if (!ok) unsupported_dtype("LayerNormalization", yt);
  check_launch("LayerNormalization");
}

void layer_norm_grad(DType t, DType dt, const void* dy, const void* x, const void* w, const void* mean,
                     const void* rstd, const void* base, void* dx, void* dw, void* db, int64_t rows, int64_t n,
                     float* partial, cudaStream_t stream) {
  if (n == 0) return;
  bool ok = with_float_pair(t, dt, [&](auto v, auto dv) {
    using T = decltype(v);
    using D = decltype(dv);
    const D* d = static_cast<const D*>(dy);
    const T *xp = static_cast<const T*>(x), *m = static_cast<const T*>(mean), *rs = static_cast<const T*>(rstd);
    if (dx && rows)
      launch_norm_rows(rows, n, "LayerNormalizationGrad", [&](auto rows_policy, unsigned blocks) {
        layer_norm_dx_kernel<decltype(rows_policy)><<<blocks, kThreads, 0, stream>>>(
            d, xp, static_cast<const T*>(w), m, rs, static_cast<const T*>(base), static_cast<T*>(dx), rows, int(n));
      });
    if (dw || db) {
      const Chunks ch = chunks_of(rows);
      float* partial_b = partial + int64_t(ch.count) * n;
      if (n % kWideColumns == 0 && packs_align<D>(d, kWideColumns) && packs_align<T>(xp, kWideColumns))
        layer_norm_dw_wide_kernel<<<wide_chunk_grid(n, ch), kThreads, 0, stream>>>(d, xp, m, rs, partial, partial_b,
                                                                                   rows, n, ch.rows);
      else
        layer_norm_dw_kernel<<<chunk_grid(n, ch), kThreads, 0, stream>>>(d, xp, m, rs, partial, partial_b, rows, n,
                                                                         ch.rows);
      const unsigned blocks = blocks_for(n);
      if (dw) sum_chunks_kernel<<<blocks, kThreads, 0, stream>>>(partial, ch.count, n, 1.f, static_cast<T*>(dw));
      if (db) sum_chunks_kernel<<<blocks, kThreads, 0, stream>>>(partial_b, ch.count, n, 1.f, static_cast<T*>(db));
    }
  });
  if (!ok) unsupported_dtype("LayerNormalizationGrad", dt);
  check_launch("LayerNormalizationGrad");
}

}  // namespace onnxtrain::kernels::cuda
