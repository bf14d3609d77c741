// The CUDA kernels of MatMul (NumPy semantics, batched with broadcasting), com.onnxtrain.FusedMatMul (operands
// read transposed) and Gemm, on matmul.cu's strided GEMM.
#include "kernels/cpu/broadcast.h"
#include "kernels/cuda/indexing.h"
#include "kernels/matmul_dims.h"
#include "ops/matmul.h"

namespace onnxtrain::kernels::cuda {
namespace {

void matmul(const ops::MatMulAttrs& at, KernelCtx& c) {
  const Tensor &A = c.in(0), &B = c.in(1);
  if (A.dtype() != B.dtype()) c.fail("operands of dtypes " + dtype_name(A.dtype()) + " and " + dtype_name(B.dtype()));
  if (c.out(0).dtype() != A.dtype())  // (attribute `to`: the GEMM writes its operands' dtype only, so far)
    throw UnsupportedError(c.node.where() + ": a " + dtype_name(c.out(0).dtype()) + " output of " +
                           dtype_name(A.dtype()) + " operands is not supported on CUDA yet");
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
  gemm(A.dtype(), A.raw(), B.raw(), c.out(0).raw(), s, stream());
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
    s.c0_rs = st[0];
    s.c0_cs = st[1];
  }
  s.batch = indexing(c, {}, {});
  gemm(A.dtype(), A.raw(), B.raw(), c.out(0).raw(), s, stream());
}

const bool kRegistered = register_kernels(cuda_device(0), {{"", "MatMul", kernel(matmul)},
                                                           {"com.onnxtrain", "FusedMatMul", kernel(matmul)},
                                                           {"", "Gemm", kernel(gemm_node)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
