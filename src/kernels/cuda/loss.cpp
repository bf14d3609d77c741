// The CUDA kernels of SoftmaxCrossEntropyLoss over (N, C) scores without class weights (a language model's unfused
// head: the exporters' cross_entropy) and of its gradient com.onnxtrain.SoftmaxCrossEntropyLossGrad, on
// cross_entropy.cu's row kernels: float32, and bfloat16 and float16 through float32 copies (kernels/in_float32.h),
// as the host computes them. Other forms (weights, (N, C, d...) scores) are refused by name.
#include "kernels/cuda/indexing.h"
#include "kernels/in_float32.h"
#include "ops/loss.h"

namespace onnxtrain::kernels::cuda {
namespace {

using ops::LossAttrs;

// Scores (N, C) of float32, checked: the cross-entropy of the call.
CrossEntropy rows_of(const KernelCtx& c, const Tensor& x, size_t target) {
  if (x.rank() != 2 || x.dtype() != DType::kFloat32)
    throw UnsupportedError(c.node.where() + ": the CUDA kernel takes (N, C) float32 scores, not " +
                           dtype_name(x.dtype()) + " " + dims_str(x.dims()));
  CrossEntropy e;
  e.n = x.dims()[0], e.c = e.ld = x.dims()[1];
  const Tensor& t = c.in(target);
  if (t.numel() != e.n) c.fail("target " + dims_str(t.dims()) + " does not fit the scores " + dims_str(x.dims()));
  if (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) c.fail("target must be int64 or int32");
  e.target_type = t.dtype();
  e.target = t.raw();
  return e;
}

void softmax_cross_entropy(const LossAttrs& a, KernelCtx& c) {
  const Tensor& x = c.in(0);
  if (c.has(2)) throw UnsupportedError(c.node.where() + ": class weights have no CUDA kernel yet");
  CrossEntropy e = rows_of(c, x, 1);
  e.has_ignore = a.has_ignore, e.ignore = a.ignore_index;
  ScratchCarver scratch{c};
  double* totals = scratch.take<double>(2);
  float* lse = c.wants(2) ? c.out(2).data<float>() : scratch.take<float>(e.n);
  zero(totals, 2 * sizeof(double));
  float* loss = c.out(0).data<float>();
  cross_entropy_rows(e, DType::kFloat32, x.data<float>(), lse, a.reduction == LossAttrs::kNone ? loss : nullptr, totals,
                     DType::kFloat32, nullptr, stream());
  if (a.reduction != LossAttrs::kNone) cross_entropy_total(a.reduction == LossAttrs::kMean, totals, loss, stream());
  if (c.wants(1)) log_probs(x.data<float>(), lse, c.out(1).data<float>(), e.n, e.c, stream());
}

// per (N) * (exp(scores - lse) - onehot(target)); an ignored target has per 0.
void softmax_cross_entropy_grad(KernelCtx& c) {
  const CrossEntropy e = rows_of(c, c.in(1), 3);
  if (c.in(0).numel() != e.n || c.in(2).numel() != e.n || c.in(0).dtype() != DType::kFloat32 ||
      c.in(2).dtype() != DType::kFloat32)
    c.fail("per " + dims_str(c.in(0).dims()) + " and lse " + dims_str(c.in(2).dims()) +
           " must hold a float32 number per row of the scores");
  cross_entropy_grad(e, DType::kFloat32, c.in(1).data<float>(), DType::kFloat32, c.in(2).data<float>(),
                     c.in(0).data<float>(), true, false, nullptr, c.out(0).raw(), stream());
}

// The totals, and the log-sum-exps when output 2 is not asked for.
Dim loss_scratch(const ops::Op&, ops::InferCtx& s) {
  const auto& outs = s.node().outputs;
  Dim r = scratch_span(Dim(16));
  if (outs.size() < 3 || !outs[2]) r = r + scratch_span(s.shape(0)[0] * Dim(4));
  return r;
}

void convert(DType from, DType to, const void* x, void* y, int64_t n) { cast(from, to, x, y, n, stream()); }

const bool kRegistered = register_kernels(
    cuda_device(0),
    {in_float32({"", "SoftmaxCrossEntropyLoss", kernel<LossAttrs>(softmax_cross_entropy), loss_scratch}, convert),
     in_float32({"com.onnxtrain", "SoftmaxCrossEntropyLossGrad", kernel(softmax_cross_entropy_grad)}, convert)});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
