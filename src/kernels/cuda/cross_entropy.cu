// Cross-entropy over scores (float32, or a 16-bit head's in its dtype) on the GPU, for the fused head
// (linear_cross_entropy.cpp) and SoftmaxCrossEntropyLoss: the launches of the rows' kernels (cross_entropy_rows.cuh),
// the count of targets and the total, the log-probabilities elementwise, and column sums (the bias's gradient) a
// thread per column.
#include "kernels/cuda/cross_entropy_rows.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

__global__ void count_kernel(CrossEntropy e, double* totals) {
  ONNXTRAIN_GRID_LOOP(r, e.n) {
    if (!ignored(e, target_of(e, r))) atomicAdd(totals + 1, 1.0);
  }
}

__global__ void total_kernel(bool mean, const double* totals, float* loss) {
  *loss = float(!mean ? totals[0] : totals[1] > 0 ? totals[0] / totals[1] : 0.0);
}

__global__ void log_probs_kernel(const float* s, const float* lse, float* out, int64_t n, int64_t c) {
  ONNXTRAIN_GRID_LOOP(i, n * c) out[i] = s[i] - lse[i / c];
}

template <typename T>
__global__ void column_sums_kernel(const T* x, int64_t n, int64_t c, const T* base, T* out) {
  ONNXTRAIN_GRID_LOOP(j, c) {
    float acc = base ? to_float(base[j]) : 0.f;
    for (int64_t r = 0; r < n; ++r) acc += to_float(x[r * c + j]);
    out[j] = from_float<T>(acc);
  }
}

}  // namespace

void cross_entropy_rows(const CrossEntropy& e, DType st, const void* s, float* lse, float* losses, double* totals,
                        DType t, void* logits, cudaStream_t stream) {
  if (e.n == 0) return;
  if (e.n > 0x7fffffff) launch_error("cross_entropy_rows: more than 2^31 rows");
  const bool ok = with_float_pair(st, logits ? t : st, [&](auto sv, auto v) {
    using S = decltype(sv);
    using T = decltype(v);
    rows_kernel<<<unsigned(e.n), kThreads, 0, stream>>>(e, static_cast<const S*>(s), lse, losses, totals,
                                                        static_cast<T*>(logits));
  });
  if (!ok) unsupported_dtype("cross_entropy_rows", t);
  check_launch("cross_entropy_rows");
}

void count_targets(const CrossEntropy& e, double* totals, cudaStream_t stream) {
  if (e.n == 0) return;
  count_kernel<<<blocks_for(e.n), kThreads, 0, stream>>>(e, totals);
  check_launch("count_targets");
}

void cross_entropy_total(bool mean, const double* totals, float* loss, cudaStream_t stream) {
  total_kernel<<<1, 1, 0, stream>>>(mean, totals, loss);
  check_launch("cross_entropy_total");
}

void cross_entropy_grad(const CrossEntropy& e, DType st, const void* s, DType t, const float* lse, const float* dloss,
                        bool per_row, bool mean, const double* totals, void* g, cudaStream_t stream) {
  if (e.n * e.ld == 0) return;
  bool ok = with_float_pair(st, t, [&](auto sv, auto v) {
    using S = decltype(sv);
    using T = decltype(v);
    constexpr int V = 8;
    const S* sp = static_cast<const S*>(s);
    const bool wide = e.ld % V == 0 && reinterpret_cast<uintptr_t>(s) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(g) % 16 == 0;
    if (wide)
      grad_kernel<S, T, V><<<rows_grid(e.n, e.ld / V), kThreads, 0, stream>>>(e, sp, lse, dloss, per_row, mean, totals,
                                                                              static_cast<T*>(g));
    else
      grad_kernel<S, T, 1><<<rows_grid(e.n, e.ld), kThreads, 0, stream>>>(e, sp, lse, dloss, per_row, mean, totals,
                                                                          static_cast<T*>(g));
  });
  if (!ok) unsupported_dtype("cross_entropy_grad", t);
  check_launch("cross_entropy_grad");
}

void log_probs(const float* s, const float* lse, float* out, int64_t n, int64_t c, cudaStream_t stream) {
  if (n * c == 0) return;
  log_probs_kernel<<<blocks_for(n * c), kThreads, 0, stream>>>(s, lse, out, n, c);
  check_launch("log_probs");
}

void column_sums(DType t, const void* x, int64_t n, int64_t c, const void* base, void* out, cudaStream_t stream) {
  if (c == 0) return;
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    column_sums_kernel<<<blocks_for(c), kThreads, 0, stream>>>(static_cast<const T*>(x), n, c,
                                                               static_cast<const T*>(base), static_cast<T*>(out));
  });
  if (!ok) unsupported_dtype("column_sums", t);
  check_launch("column_sums");
}

}  // namespace onnxtrain::kernels::cuda
