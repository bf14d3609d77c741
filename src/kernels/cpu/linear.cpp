// com.onnxtrain.Linear(X, W, B?) = X W^T + B: one GEMM over all rows of X (..., K) with W (N, K) read
// transposed; the bias is written first and the GEMM accumulates onto it. A bf16 Linear writes float32 when its
// node says so (attribute `to`, ops/matmul.h).
#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

void linear(KernelCtx& c) {
  const Tensor &x = c.in(0), &w = c.in(1);
  int64_t k = x.dims().back(), n = w.dims()[0], rows = k ? x.numel() / k : 0;
  if (w.dims()[1] != k)
    c.fail("X " + dims_str(x.dims()) + " and W " + dims_str(w.dims()) + " differ in their inner dim");
  if (c.has(2) && c.in(2).numel() != n)
    c.fail("bias " + dims_str(c.in(2).dims()) + " is not of W's " + std::to_string(n) + " rows");
  if (x.dtype() == DType::kBFloat16) {  // (into float32 with attribute `to`)
    const BFloat16* b = c.has(2) ? c.in(2).data<BFloat16>() : nullptr;
    const Bf16Operand xs{x.data<BFloat16>(), k}, ws{w.data<BFloat16>(), k, 0, true};
    if (c.out(0).dtype() == DType::kFloat32) return gemm_bf16(1, rows, n, k, xs, ws, c.out(0).data<float>(), 1, b);
    return gemm_bf16(1, rows, n, k, xs, ws, c.out(0).data<BFloat16>(), 1, b);
  }
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = c.out(0).data<T>();  // (rows, N)
    if (c.has(2)) {
      const T* b = c.in(2).data<T>();
      parallel_for(rows, n, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) std::copy(b, b + n, o + r * n);
      });
    }
    gemm<T>(false, true, rows, n, k, T(1), x.data<T>(), k, w.data<T>(), k, c.has(2) ? T(1) : T(0), o, n);
  });
}

const bool kRegistered =
    register_kernels(kCpu, {in_float32({"com.onnxtrain", "Linear", kernel(linear)}, gemm_bf16_native)});

}  // namespace
}  // namespace onnxtrain::kernels
