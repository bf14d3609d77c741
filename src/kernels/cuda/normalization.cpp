// The CUDA kernels of LayerNormalization (ONNX's, and com.onnxtrain's with Y of attribute `to`) and
// com.onnxtrain.LayerNormalizationGrad (normalization.cu's launchers): scale and bias of the input's dtype,
// broadcast over the normalized dims as on the CPU; Y and dY of that dtype or 16 bits beside a float32 X.
#include "kernels/cuda/indexing.h"
#include "kernels/strides.h"
#include "ops/normalization.h"

namespace onnxtrain::kernels::cuda {
namespace {

// x normalized from `axis` on: that axis (non-negative), the rows and the row length.
struct Rows {
  int64_t axis, rows = 1, n = 1;
};
Rows rows_of(const Tensor& x, int64_t axis) {
  Rows r{axis < 0 ? axis + x.rank() : axis};
  for (int64_t i = 0; i < x.rank(); ++i) (i < r.axis ? r.rows : r.n) *= x.dims()[size_t(i)];
  return r;
}

void layer_norm(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  same_dtype(c, x, 1, 2);
  const Rows r = rows_of(x, at.axis);
  const std::vector<int64_t> norm(x.dims().begin() + r.axis, x.dims().end());
  for (size_t i : {1, 2})
    if (c.has(i) && !broadcasts_as_suffix(c.in(i).dims(), norm))
      c.fail(std::string(i == 1 ? "scale " : "bias ") + dims_str(c.in(i).dims()) +
             " does not broadcast over the normalized dims " + dims_str(norm));
  const int64_t nw = c.in(1).numel(), nb = c.has(2) ? c.in(2).numel() : 1;
  cuda::layer_norm(x.dtype(), c.out(0).dtype(), x.raw(), c.in(1).raw(), c.has(2) ? c.in(2).raw() : nullptr,
                   c.out(0).raw(), c.wants(1) ? c.out(1).raw() : nullptr, c.wants(2) ? c.out(2).raw() : nullptr,
                   r.rows, r.n, nw, nb, at.epsilon, stream());
}

void layer_norm_grad(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1);
  same_dtype(c, x, 1, 4);
  const Rows r = rows_of(x, at.axis);
  if (c.in(2).numel() != r.n || dy.numel() != x.numel() || c.in(3).numel() != r.rows || c.in(4).numel() != r.rows)
    c.fail("dy " + dims_str(dy.dims()) + ", x " + dims_str(x.dims()) + ", scale " + dims_str(c.in(2).dims()) +
           " and the statistics " + dims_str(c.in(3).dims()) + " do not fit together");
  if (c.has(5) && (c.in(5).dtype() != x.dtype() || c.in(5).numel() != x.numel()))
    c.fail("base " + dims_str(c.in(5).dims()) + " must be x's dtype and shape");
  cuda::layer_norm_grad(x.dtype(), dy.dtype(), dy.raw(), x.raw(), c.in(2).raw(), c.in(3).raw(), c.in(4).raw(),
                        c.has(5) ? c.in(5).raw() : nullptr, c.wants(0) ? c.out(0).raw() : nullptr,
                        c.wants(1) ? c.out(1).raw() : nullptr, c.wants(2) ? c.out(2).raw() : nullptr, r.rows, r.n,
                        c.scratch_as<float>(0, size_t(2 * kRowChunks * r.n)), stream());
}

// LayerNormalizationGrad's scratch: dscale's and dbias's partial sums over chunks of the rows.
Dim partial_sums_bytes(const ops::Op&, ops::InferCtx& s) { return shape_numel(s.shape(2)) * Dim(2 * kRowChunks * 4); }

const bool kRegistered =
    register_kernels(cuda_device(0), {{"", "LayerNormalization", kernel(layer_norm)},
                                      {"com.onnxtrain", "LayerNormalization", kernel(layer_norm)},
                                      {"com.onnxtrain", "LayerNormalizationGrad", kernel(layer_norm_grad),
                                                                       partial_sums_bytes}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
