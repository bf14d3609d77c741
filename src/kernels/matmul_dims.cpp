#include "kernels/matmul_dims.h"

#include "kernels/strides.h"

namespace onnxtrain::kernels {

MatMulDims matmul_dims(const ops::MatMulAttrs& at, const KernelCtx& c) {
  const Tensor &A = c.in(0), &B = c.in(1);
  MatMulDims d{A.dims(), B.dims(), {}, {}, {}, 0, 0, 0};
  if (at.fused && (d.a.size() < 2 || d.b.size() < 2))
    c.fail("inputs must have rank >= 2, got " + dims_str(d.a) + " and " + dims_str(d.b));
  if (d.a.size() == 1) d.a.insert(d.a.begin(), 1);
  if (d.b.size() == 1) d.b.push_back(1);
  const size_t ra = d.a.size(), rb = d.b.size();
  d.m = d.a[ra - 2 + at.ta];
  d.k = d.a[ra - 1 - at.ta];
  d.n = d.b[rb - 1 - at.tb];
  if (d.b[rb - 2 + at.tb] != d.k)
    c.fail("inner dims differ: " + dims_str(A.dims()) + " x " + dims_str(B.dims()) + at.flags());
  d.a_batch.assign(d.a.begin(), d.a.end() - 2);
  d.b_batch.assign(d.b.begin(), d.b.end() - 2);
  if (!broadcast_dims(d.a_batch, d.b_batch, &d.batch))
    c.fail("batch dims " + dims_str(d.a_batch) + " and " + dims_str(d.b_batch) + " do not broadcast");
  return d;
}

}  // namespace onnxtrain::kernels
