// The CUDA kernels of MatMul (NumPy semantics, batched with broadcasting), com.onnxtrain.FusedMatMul (operands
// read transposed), Gemm and com.onnxtrain.Linear (X W^T + B over all rows of X), on matmul.cu's strided GEMM. A
// FusedMatMul or Linear with attribute `to` writes float32 from 16-bit operands. And product.h's one product.
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/product.h"
#include "kernels/cuda/workspace.h"
#include "kernels/matmul_dims.h"
#include "kernels/strides.h"
#include "ops/matmul.h"

namespace onnxtrain::kernels::cuda {
namespace {

void matmul(const ops::MatMulAttrs& at, KernelCtx& c) {
  const Tensor &A = c.in(0), &B = c.in(1);
  if (A.dtype() != B.dtype()) c.fail("operands of dtypes " + dtype_name(A.dtype()) + " and " + dtype_name(B.dtype()));
  const MatMulDims d = matmul_dims(at, c);
  GemmShape s;
  s.m = d.m;
  s.n = d.n;
  s.k = d.k;
  const int64_t a_cols = d.a.back(), b_cols = d.b.back();
  s.a_rs = at.ta ? 1 : a_cols;
  s.a_cs = at.ta ? a_cols : 1;
  s.b_rs = at.tb ? 1 : b_cols;
  s.b_cs = at.tb ? b_cols : 1;
  auto sa = broadcast_strides(d.a_batch, d.batch), sb = broadcast_strides(d.b_batch, d.batch);
  for (auto& v : sa) v *= d.a[d.a.size() - 2] * a_cols;
  for (auto& v : sb) v *= d.b[d.b.size() - 2] * b_cols;
  s.batch = indexing(c, d.batch, {sa, sb});
  s.workspace = workspace_in(c, 0, c.scratch_bytes);
  gemm(A.dtype(), c.out(0).dtype(), A.raw(), B.raw(), c.out(0).raw(), s, stream());
}

void gemm_node(const ops::GemmAttrs& at, KernelCtx& c) {
  const Tensor &A = c.in(0), &B = c.in(1);
  if (A.dtype() != B.dtype()) c.fail("operands of dtypes " + dtype_name(A.dtype()) + " and " + dtype_name(B.dtype()));
  GemmShape s;
  s.m = at.ta ? A.dims()[1] : A.dims()[0];
  s.k = at.ta ? A.dims()[0] : A.dims()[1];
  s.n = at.tb ? B.dims()[0] : B.dims()[1];
  s.a_rs = at.ta ? 1 : A.dims()[1];
  s.a_cs = at.ta ? A.dims()[1] : 1;
  s.b_rs = at.tb ? 1 : B.dims()[1];
  s.b_cs = at.tb ? B.dims()[1] : 1;
  s.alpha = at.alpha;
  if (c.has(2) && at.beta != 0) {
    const Tensor& C = c.in(2);
    if (C.dtype() != A.dtype()) c.fail("C of dtype " + dtype_name(C.dtype()));
    auto st = broadcast_strides(C.dims(), c.out(0).dims());
    s.beta = at.beta;
    s.c0 = C.raw();
    s.c0_dtype = C.dtype();
    s.c0_rs = st[0];
    s.c0_cs = st[1];
  }
  s.batch = indexing(c, {}, {});
  s.workspace = workspace_in(c, 0, c.scratch_bytes);
  gemm(A.dtype(), c.out(0).dtype(), A.raw(), B.raw(), c.out(0).raw(), s, stream());
}

void linear(KernelCtx& c) {
  const Tensor &X = c.in(0), &W = c.in(1);
  if (X.dtype() != W.dtype()) c.fail("X of dtype " + dtype_name(X.dtype()) + " and W of " + dtype_name(W.dtype()));
  const int64_t k = X.dims().back(), n = W.dims()[0], rows = k ? X.numel() / k : 0;
  if (W.dims()[1] != k)
    c.fail("X " + dims_str(X.dims()) + " and W " + dims_str(W.dims()) + " differ in their inner dim");
  if (c.has(2) && (c.in(2).numel() != n || c.in(2).dtype() != X.dtype()))
    c.fail("bias " + dims_str(c.in(2).dims()) + " of dtype " + dtype_name(c.in(2).dtype()) + " is not one " +
           dtype_name(X.dtype()) + " value for each of W's " + std::to_string(n) + " rows");
  // (W read transposed; the bias a row added to each)
  product(X.dtype(), c.out(0).dtype(), X.raw(), k, 1, W.raw(), 1, k, rows, n, k, c.has(2) ? c.in(2).raw() : nullptr,
          0, c.out(0).raw(), workspace_in(c, 0, c.scratch_bytes));
}

const bool kRegistered =
    register_kernels(cuda_device(0), {{"", "MatMul", kernel(matmul), product_scratch},
                                      {"com.onnxtrain", "FusedMatMul", kernel(matmul), product_scratch},
                                      {"", "Gemm", kernel(gemm_node), product_scratch},
                                      {"com.onnxtrain", "Linear", kernel(linear), product_scratch}});

}  // namespace

void product(DType t, DType out, const void* a, int64_t a_rs, int64_t a_cs, const void* b, int64_t b_rs,
             int64_t b_cs, int64_t m, int64_t n, int64_t k, const void* base, int64_t base_rs, void* c, Workspace ws) {
  GemmShape s;
  s.m = m, s.n = n, s.k = k;
  s.a_rs = a_rs, s.a_cs = a_cs, s.b_rs = b_rs, s.b_cs = b_cs;
  if (base) s.beta = 1, s.c0 = base, s.c0_dtype = base_rs == 0 ? t : out, s.c0_rs = base_rs, s.c0_cs = 1;
  s.workspace = ws;
  gemm(t, out, a, b, c, s, stream());  // (s.batch: rank 0, one product)
}

}  // namespace onnxtrain::kernels::cuda
