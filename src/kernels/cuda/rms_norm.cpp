// The CUDA kernels of com.onnxtrain.RMSNormalization and RMSNormalizationGrad (rms_norm.cu's launchers): X, the
// scale and the statistic of one float dtype, the scale one value per normalized element, as on the CPU; Y and dY
// of that dtype or 16 bits beside a float32 X.
#include "kernels/cuda/indexing.h"
#include "ops/normalization.h"

namespace onnxtrain::kernels::cuda {
namespace {

struct Rows {
  int64_t rows = 1, n = 1;
};

// X's rows and their length (the dims from the axis on), after checking the scale and the dtypes of the inputs
// from X (input scale - 1) to `last`.
Rows rows_of(const ops::NormAttrs& at, const KernelCtx& c, const Tensor& x, size_t scale, size_t last) {
  same_dtype(c, x, scale - 1, last);
  const int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  Rows r;
  for (int64_t i = 0; i < x.rank(); ++i) (i < a ? r.rows : r.n) *= x.dims()[size_t(i)];
  if (c.in(scale).numel() != r.n)
    c.fail("scale " + dims_str(c.in(scale).dims()) + " does not hold one value for each of the " + std::to_string(r.n) +
           " normalized elements of " + dims_str(x.dims()));
  return r;
}

void rms_norm_node(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  const Rows r = rows_of(at, c, x, 1, 1);
  rms_norm(x.dtype(), c.out(0).dtype(), x.raw(), c.in(1).raw(), c.out(0).raw(),
           c.wants(1) ? c.out(1).raw() : nullptr, r.rows, r.n, at.epsilon, stream());
}

void rms_norm_grad_node(const ops::NormAttrs& at, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1), &rstd = c.in(3);
  const Rows r = rows_of(at, c, x, 2, 3);
  if (dy.numel() != x.numel() || rstd.numel() != r.rows)
    c.fail("dY " + dims_str(dy.dims()) + ", X " + dims_str(x.dims()) + " and the statistic " + dims_str(rstd.dims()) +
           " do not fit together");
  if (c.has(4) && (c.in(4).dtype() != x.dtype() || c.in(4).numel() != x.numel()))
    c.fail("base " + dims_str(c.in(4).dims()) + " must be X's dtype and shape");
  rms_norm_grad(x.dtype(), dy.dtype(), dy.raw(), x.raw(), c.in(2).raw(), rstd.raw(), c.has(4) ? c.in(4).raw() : nullptr,
                c.wants(0) ? c.out(0).raw() : nullptr, c.wants(1) ? c.out(1).raw() : nullptr, r.rows, r.n,
                c.scratch_as<float>(0, size_t(kRowChunks * r.n)), stream());
}

// RMSNormalizationGrad's scratch: dscale's partial sums over chunks of the rows.
Dim partial_sums_bytes(const ops::Op&, ops::InferCtx& s) { return shape_numel(s.shape(2)) * Dim(kRowChunks * 4); }

const bool kRegistered =
    register_kernels(cuda_device(0), {{"com.onnxtrain", "RMSNormalization", kernel(rms_norm_node)},
                                      {"com.onnxtrain", "RMSNormalizationGrad", kernel(rms_norm_grad_node),
                                                                        partial_sums_bytes}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
