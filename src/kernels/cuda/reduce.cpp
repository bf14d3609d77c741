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

// Whether a sum or mean reduces x's leading dims and keeps the others (x as rows of the kept elements): then it goes
// by columns over chunks of the rows (column_reduce), its partial sums in scratch, rather than a block per output
// walking a column.
bool by_columns(const ops::ReduceAttrs& at, const std::vector<bool>& mask) {
  using K = ops::ReduceAttrs::Kind;
  size_t lead = 0;
  while (lead < mask.size() && mask[lead]) ++lead;
  if ((at.kind != K::kSum && at.kind != K::kMean) || lead == 0 || lead == mask.size()) return false;
  for (size_t d = lead; d < mask.size(); ++d)
    if (mask[d]) return false;
  return true;
}

Dim reduce_scratch(const ops::Op& op, ops::InferCtx& s) {
  const auto& at = attrs_of<ops::ReduceAttrs>(op);
  const std::vector<bool> mask = at.mask(s);
  if (!by_columns(at, mask)) return Dim(0);
  Dim kept(1);
  for (size_t d = 0; d < mask.size(); ++d)
    if (!mask[d]) kept = kept * s.shape(0)[d];
  return kept * Dim(kRowChunks * 4);
}

void reduce_node(const ops::ReduceAttrs& at, KernelCtx& c) {
  const Reduce op = kind_of(at, c);
  const Tensor& x = c.in(0);
  std::vector<bool> mask = at.mask(*c.shapes);
  if (by_columns(at, mask)) {
    int64_t rows = 1, n = 1;
    for (size_t d = 0; d < mask.size(); ++d) (mask[d] ? rows : n) *= x.dims()[d];
    return column_reduce(x.dtype(), x.raw(), rows, n, op == Reduce::kMean ? float(rows) : 1.f,
                         c.scratch_as<float>(0, size_t(kRowChunks * n)), c.out(0).raw(), stream());
  }
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

KernelDef reduce_def(const char* name) { return {"", name, kernel(reduce_node), reduce_scratch}; }

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
