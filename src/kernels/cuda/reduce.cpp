// The CUDA kernels of the reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceSumSquare, ReduceL2) and
// of Softmax and LogSoftmax, on reduce.cu's block reductions.
#include "kernels/cuda/indexing.h"
#include "kernels/strides.h"
#include "ops/reduce.h"
#include "ops/softmax.h"

namespace onnxtrain::kernels::cuda {
namespace {

Reduce kind_of(const ops::ReduceAttrs& at, KernelCtx& c) {
  using K = ops::ReduceAttrs::Kind;
  switch (at.kind) {
    case K::kSum: return Reduce::kSum;
    case K::kMean: return Reduce::kMean;
    case K::kMax: return Reduce::kMax;
    case K::kMin: return Reduce::kMin;
    case K::kSumSquare: return Reduce::kSumSquare;
    case K::kL2: return Reduce::kL2;
    default: throw UnsupportedError(c.node.where() + ": this reduction has no CUDA kernel yet");
  }
}

void reduce_node(const ops::ReduceAttrs& at, KernelCtx& c) {
  const Reduce op = kind_of(at, c);
  const Tensor& x = c.in(0);
  std::vector<bool> mask = at.mask(*c.shapes);
  auto st = contiguous_strides(x.dims());
  std::vector<int64_t> kept_dims, kept_st, red_dims, red_st;
  for (size_t d = 0; d < mask.size(); ++d) {
    (mask[d] ? red_dims : kept_dims).push_back(x.dims()[d]);
    (mask[d] ? red_st : kept_st).push_back(st[d]);
  }
  if (x.numel() == 0 && (op == Reduce::kMax || op == Reduce::kMin))
    throw UnsupportedError(c.node.where() + ": the CUDA kernel does not reduce an empty tensor to its extreme");
  reduce(op, x.dtype(), x.raw(), c.out(0).raw(), indexing(c, kept_dims, {kept_st}), indexing(c, red_dims, {red_st}),
         stream());
}

void softmax_node(const ops::SoftmaxAttrs& a, KernelCtx& c) {
  if (a.kind == ops::SoftmaxAttrs::kHardmax) throw UnsupportedError(c.node.where() + ": Hardmax has no CUDA kernel");
  const Tensor& x = c.in(0);
  const auto& d = x.dims();
  const int64_t axis = a.axis < 0 ? a.axis + x.rank() : a.axis;
  if (axis < 0 || axis >= std::max<int64_t>(x.rank(), 1)) c.fail("axis " + std::to_string(a.axis) + " out of range");
  int64_t outer = 1, cols = 1, inner = 1;
  for (int64_t i = 0; i < x.rank(); ++i) {
    int64_t n = d[size_t(i)];
    if (i < axis)
      outer *= n;
    else if (i == axis || a.flatten)
      cols *= n;
    else
      inner *= n;
  }
  softmax(x.dtype(), a.kind == ops::SoftmaxAttrs::kLogSoftmax, x.raw(), c.out(0).raw(), outer, cols, inner, stream());
}

KernelDef reduce_def(const char* name) { return {"", name, kernel(reduce_node)}; }

const bool kRegistered = register_kernels(cuda_device(0), {reduce_def("ReduceSum"),
                                                           reduce_def("ReduceMean"),
                                                           reduce_def("ReduceMax"),
                                                           reduce_def("ReduceMin"),
                                                           reduce_def("ReduceSumSquare"),
                                                           reduce_def("ReduceL2"),
                                                           {"", "Softmax", kernel(softmax_node)},
                                                           {"", "LogSoftmax", kernel(softmax_node)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
