// The CUDA kernels of com.onnxtrain.MaskedSoftmax, MaskedSoftmaxGrad and AttentionSoftmax (the scores' product by
// matmul.cu's GEMM, every column computed, then the masked softmax in place), on masked_softmax.cu's launchers.
// Scale and fill stay on the device.
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/workspace.h"
#include "kernels/strides.h"

namespace onnxtrain::kernels::cuda {
namespace {

// The rows of scores of `dims` (all but the last dim) with the offsets of `cond`'s row in each, and its column
// stride; a ShapeError when cond does not broadcast to the scores.
std::pair<Indexing, int64_t> mask_rows(const KernelCtx& c, const std::vector<int64_t>& dims, const Tensor& cond) {
  std::vector<int64_t> bd;
  if (dims.empty() || !broadcast_dims(dims, cond.dims(), &bd) || bd != dims)
    c.fail("cond " + dims_str(cond.dims()) + " does not broadcast to the scores " + dims_str(dims));
  std::vector<int64_t> st = broadcast_strides(cond.dims(), dims);
  const int64_t col = st.back();
  st.pop_back();
  return {indexing(c, std::vector<int64_t>(dims.begin(), dims.end() - 1), {st}), col};
}

void check_scalars(const KernelCtx& c, const Tensor& x, std::initializer_list<size_t> inputs) {
  for (size_t i : inputs)
    if (c.in(i).numel() != 1 || c.in(i).dtype() != x.dtype())
      c.fail("input " + std::to_string(i) + " must be a scalar of the scores' dtype " + dtype_name(x.dtype()));
}

void softmax_of(const KernelCtx& c, const Tensor& x, size_t scale, Tensor& y) {
  check_scalars(c, x, {scale, scale + 2});
  const Tensor& cond = c.in(scale + 1);
  auto [rows, col] = mask_rows(c, x.dims(), cond);
  masked_softmax(x.dtype(), x.raw(), cond.data<bool>(), rows, col, x.dims().back(), c.in(scale).raw(),
                 c.in(scale + 2).raw(), y.raw(), stream());
}

void masked_softmax_node(KernelCtx& c) { softmax_of(c, c.in(0), 1, c.out(0)); }

void masked_softmax_grad_node(KernelCtx& c) {
  const Tensor &dy = c.in(0), &y = c.in(1), &cond = c.in(3);
  if (dy.dims() != y.dims() || dy.dtype() != y.dtype())
    c.fail("dY " + dims_str(dy.dims()) + " and Y " + dims_str(y.dims()) + " differ");
  check_scalars(c, y, {2});
  auto [rows, col] = mask_rows(c, y.dims(), cond);
  masked_softmax_grad(y.dtype(), dy.raw(), y.raw(), cond.data<bool>(), rows, col, y.dims().back(), c.in(2).raw(),
                      c.out(0).raw(), stream());
}

void attention_softmax(KernelCtx& c) {
  const Tensor &A = c.in(0), &B = c.in(1);
  Tensor& out = c.out(0);
  const std::vector<int64_t>& od = out.dims();
  if (A.dtype() != B.dtype()) c.fail("A of dtype " + dtype_name(A.dtype()) + " and B of " + dtype_name(B.dtype()));
  GemmShape s;
  s.m = od[od.size() - 2];
  s.n = od.back();
  s.k = A.dims().back();
  if (B.dims()[B.dims().size() - 2] != s.k)
    c.fail("inner dims differ: " + dims_str(A.dims()) + " x " + dims_str(B.dims()));
  s.a_rs = s.k, s.a_cs = 1, s.b_rs = s.n, s.b_cs = 1;
  const std::vector<int64_t> batch(od.begin(), od.end() - 2), ab(A.dims().begin(), A.dims().end() - 2),
      bb(B.dims().begin(), B.dims().end() - 2);
  auto sa = broadcast_strides(ab, batch), sb = broadcast_strides(bb, batch);
  for (auto& v : sa) v *= s.m * s.k;
  for (auto& v : sb) v *= s.k * s.n;
  s.batch = indexing(c, batch, {sa, sb});
  s.workspace = workspace_in(c, 0, c.scratch_bytes);
  gemm(A.dtype(), out.dtype(), A.raw(), B.raw(), out.raw(), s, stream());
  softmax_of(c, out, 2, out);
}

const bool kRegistered = register_kernels(
    cuda_device(0), {{"com.onnxtrain", "MaskedSoftmax", kernel(masked_softmax_node)},
                     {"com.onnxtrain", "MaskedSoftmaxGrad", kernel(masked_softmax_grad_node)},
                     {"com.onnxtrain", "AttentionSoftmax", kernel(attention_softmax), product_scratch}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
