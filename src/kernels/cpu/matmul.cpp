// MatMul (NumPy semantics, batched with broadcasting), com.onnxtrain.FusedMatMul (operands read transposed)
// and Gemm.
#include "ops/matmul.h"

#include "core/parallel.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/kernel.h"
#include "kernels/matmul_dims.h"

namespace onnxtrain::kernels {
namespace {

void matmul(const ops::MatMulAttrs& at, KernelCtx& c) {
  const Tensor &A = c.in(0), &B = c.in(1);
  const MatMulDims d = matmul_dims(at, c);
  const int64_t m = d.m, n = d.n, k = d.k;
  const auto &ab = d.a_batch, &bb = d.b_batch, &batch = d.batch;
  int64_t nb = numel_of(batch), na = numel_of(ab), nbb = numel_of(bb);
  const int64_t lda = at.ta ? m : k, ldb = at.tb ? k : n;
  if (A.dtype() == DType::kBFloat16) {  // into bf16, or float32 (FusedMatMul's `to`)
    const BFloat16 *a = A.data<BFloat16>(), *b = B.data<BFloat16>();
    auto run = [&](auto* o) {
      if (nbb == 1 && !at.ta && na == nb)  // B shared by every batch: one GEMM over all rows of A
        return gemm_bf16(1, na * m, n, k, {a, k}, {b, ldb, 0, at.tb}, o);
      if ((na == nb || na == 1) && (nbb == nb || nbb == 1))  // each operand batched alike, or shared
        return gemm_bf16(nb, m, n, k, {a, lda, na == 1 ? 0 : m * k, at.ta}, {b, ldb, nbb == 1 ? 0 : k * n, at.tb},
                         o);
      auto sa = broadcast_strides(ab, batch), sb = broadcast_strides(bb, batch);
      for (int64_t i = 0; i < nb; ++i) {
        auto [oa, ob] = broadcast_offsets<2>(i, batch, {&sa, &sb});
        gemm_bf16(1, m, n, k, {a + oa * m * k, lda, 0, at.ta}, {b + ob * k * n, ldb, 0, at.tb}, o + i * m * n);
      }
    };
    if (c.out(0).dtype() == DType::kFloat32) return run(c.out(0).data<float>());
    return run(c.out(0).data<BFloat16>());
  }
  dispatch<kWideNumeric>(A.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = A.data<T>();
    const T* b = B.data<T>();
    T* o = c.out(0).data<T>();
    if (nbb == 1 && !at.ta) {  // B shared by every batch: one GEMM over all rows of A
      if (na == nb) return gemm<T>(false, at.tb, na * m, n, k, T(1), a, k, b, ldb, T(0), o, n);
    }
    auto sa = broadcast_strides(ab, batch), sb = broadcast_strides(bb, batch);
    const bool small = nb > 1 && m * n * k < (int64_t(1) << 22);
    auto one = [&](int64_t i) {
      auto [oa, ob] = broadcast_offsets<2>(i, batch, {&sa, &sb});
      const T *ai = a + oa * m * k, *bi = b + ob * k * n;
      if constexpr (kFloat<T>) {
        if (small) return small_gemm<T>(at.ta, at.tb, m, n, k, ai, bi, o + i * m * n);
      }
      gemm<T>(at.ta, at.tb, m, n, k, T(1), ai, lda, bi, ldb, T(0), o + i * m * n, n);
    };
    // Small GEMMs (attention heads): the batches in parallel, each GEMM on one thread (BLAS runs
    // single-threaded inside a parallel region); large ones: one after another, each on every thread.
    if (small) {
      parallel_for(nb, m * n * k, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) one(i);
      });
    } else {
      for (int64_t i = 0; i < nb; ++i) one(i);
    }
  });
}

void gemm_kernel(const ops::GemmAttrs& at, KernelCtx& c) {
  const Tensor &A = c.in(0), &B = c.in(1);
  int64_t m = at.ta ? A.dims()[1] : A.dims()[0], k = at.ta ? A.dims()[0] : A.dims()[1];
  int64_t n = at.tb ? B.dims()[0] : B.dims()[1];
  Tensor& out = c.out(0);
  if (A.dtype() == DType::kBFloat16) {
    BFloat16* o = out.data<BFloat16>();
    bool accumulate = c.has(2) && at.beta != 0;
    if (accumulate) {
      const Tensor& C = c.in(2);
      float bv = at.beta;
      broadcast_apply<1, BFloat16>(o, out.dims(), {C.data<BFloat16>()}, {&C.dims()},
                                   [bv](BFloat16 x) { return BFloat16(bv * x); });
    }
    return gemm_bf16(1, m, n, k, {A.data<BFloat16>(), A.dims()[1], 0, at.ta},
                     {B.data<BFloat16>(), B.dims()[1], 0, at.tb}, o, at.alpha, nullptr, accumulate);
  }
  dispatch<kWideNumeric>(A.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    T beta = T(0);
    if (c.has(2) && at.beta != 0) {
      const Tensor& C = c.in(2);
      T bv = T(at.beta);
      broadcast_apply<1, T>(o, out.dims(), {C.data<T>()}, {&C.dims()}, [bv](T x) { return T(bv * x); });
      beta = T(1);
    }
    gemm<T>(at.ta, at.tb, m, n, k, T(at.alpha), A.data<T>(), A.dims()[1], B.data<T>(), B.dims()[1], beta, o, n);
  });
}

const bool kRegistered =
    register_kernels(kCpu, {
                               in_float32({"", "MatMul", kernel(matmul)}, gemm_bf16_native),
                               in_float32({"com.onnxtrain", "FusedMatMul", kernel(matmul)}, gemm_bf16_native),
                               in_float32({"", "Gemm", kernel(gemm_kernel)}, gemm_bf16_native),
                           });

}  // namespace
}  // namespace onnxtrain::kernels
