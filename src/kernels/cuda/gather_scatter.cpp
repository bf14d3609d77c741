// The CUDA kernels of Gather (any axis, int32 or int64 indices), GatherND (int64 indices, batch dims), ScatterND
// (reduction none or add: Gather's gradient), GatherElements and ScatterElements (reduction none or add:
// GatherElements' gradient), on gather_scatter.cu's launchers. The indices stay on the device.
#include "kernels/cuda/indexing.h"
#include "kernels/elements_shape.h"
#include "kernels/strides.h"
#include "ops/axis_util.h"
#include "ops/indexing.h"

namespace onnxtrain::kernels::cuda {
namespace {

void gather_node(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &idx = c.in(1);
  const int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  const ops::AxisView v = ops::axis_view(x.dims(), a);
  gather(int(dtype_size(x.dtype())), x.raw(), idx.dtype(), idx.raw(), c.out(0).raw(), v.outer, v.n, idx.numel(),
         v.inner, stream());
}

void gather_nd_node(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &idx = c.in(1);
  if (idx.dtype() != DType::kInt64) c.fail("indices must be int64, not " + dtype_name(idx.dtype()));
  const int64_t b = at.batch_dims;
  if (idx.rank() == 0 || b < 0 || b + idx.dims().back() > x.rank() || idx.dims().back() > kMaxRank)
    c.fail("indices " + dims_str(idx.dims()) + " do not index data " + dims_str(x.dims()) + " past " +
           std::to_string(b) + " batch dims");
  NdIndex nd;
  nd.k = int(idx.dims().back());
  const auto st = contiguous_strides(x.dims());
  int64_t batch = 1, slice = 1;
  for (size_t d = 0; d < x.dims().size(); ++d) {
    if (int64_t(d) < b) batch *= x.dims()[d];
    else if (int64_t(d) < b + nd.k) nd.dims[d - size_t(b)] = x.dims()[d], nd.strides[d - size_t(b)] = st[d];
    else slice *= x.dims()[d];
  }
  const int64_t rows = nd.k ? idx.numel() / nd.k : 0;
  if (c.out(0).numel() != rows * slice)
    c.fail("output " + dims_str(c.out(0).dims()) + " does not hold what indices " + dims_str(idx.dims()) +
           " gather from data " + dims_str(x.dims()));
  gather_nd(int(dtype_size(x.dtype())), idx.data<int64_t>(), x.raw(), c.out(0).raw(), rows,
            batch ? rows / batch : 1, b > 0 ? st[size_t(b - 1)] : 0, slice, nd, stream());
}

void scatter_nd_node(const ops::IndexAttrs& at, KernelCtx& c) {
  using Reduction = ops::IndexAttrs::Reduction;
  const Tensor &x = c.in(0), &idx = c.in(1), &upd = c.in(2);
  if (at.reduction != Reduction::kNone && at.reduction != Reduction::kAdd)
    throw UnsupportedError(c.node.where() + ": ScatterND's reductions mul, max and min have no CUDA kernel yet");
  if (idx.dtype() != DType::kInt64) c.fail("indices must be int64, not " + dtype_name(idx.dtype()));
  if (idx.rank() == 0 || idx.dims().back() > x.rank() || idx.dims().back() > kMaxRank)
    c.fail("indices " + dims_str(idx.dims()) + " do not index data " + dims_str(x.dims()));
  if (upd.dtype() != x.dtype())
    c.fail("updates of dtype " + dtype_name(upd.dtype()) + " into " + dtype_name(x.dtype()));
  NdIndex nd;
  nd.k = int(idx.dims().back());
  const auto st = contiguous_strides(x.dims());
  int64_t slice = 1;
  for (size_t d = 0; d < x.dims().size(); ++d) {
    if (d < size_t(nd.k)) nd.dims[d] = x.dims()[d], nd.strides[d] = st[d];
    else slice *= x.dims()[d];
  }
  const int64_t count = nd.k ? idx.numel() / nd.k : 0;
  if (upd.numel() != count * slice)
    c.fail("updates " + dims_str(upd.dims()) + " do not fit indices " + dims_str(idx.dims()) + " into data " +
           dims_str(x.dims()));
  copy(x, c.out(0));  // (nothing in place)
  scatter_nd(x.dtype(), at.reduction == Reduction::kAdd, idx.data<int64_t>(), upd.raw(), c.out(0).raw(), count, slice,
             nd, stream());
}

// Where GatherElements' and ScatterElements' indices lead in the data x along `axis` (checked).
ElementIndex element_index(const KernelCtx& c, const Tensor& idx, const Tensor& x, int64_t axis) {
  check_elements_shape(c, idx, x, axis);
  std::vector<int64_t> data = contiguous_strides(x.dims());
  ElementIndex e;
  e.n = x.dims()[size_t(axis)];
  e.axis_stride = data[size_t(axis)];
  data[size_t(axis)] = 0;
  e.walk = indexing(c, idx.dims(), {data, contiguous_strides(idx.dims())});
  return e;
}

void gather_elements_node(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &idx = c.in(1);
  const ElementIndex e = element_index(c, idx, x, at.axis < 0 ? at.axis + x.rank() : at.axis);
  gather_elements(int(dtype_size(x.dtype())), x.raw(), idx.dtype(), idx.raw(), c.out(0).raw(), e, stream());
}

void scatter_elements_node(const ops::IndexAttrs& at, KernelCtx& c) {
  using Reduction = ops::IndexAttrs::Reduction;
  const Tensor &x = c.in(0), &idx = c.in(1), &upd = c.in(2);
  if (at.reduction != Reduction::kNone && at.reduction != Reduction::kAdd)
    throw UnsupportedError(c.node.where() + ": ScatterElements' reductions mul, max and min have no CUDA kernel yet");
  if (upd.dims() != idx.dims() || upd.dtype() != x.dtype())
    c.fail("updates " + dtype_name(upd.dtype()) + " " + dims_str(upd.dims()) + " are not the data's dtype shaped as "
           "indices " + dims_str(idx.dims()));
  const ElementIndex e = element_index(c, idx, x, at.axis < 0 ? at.axis + x.rank() : at.axis);
  copy(x, c.out(0));  // (nothing when in place)
  scatter_elements(x.dtype(), at.reduction == Reduction::kAdd, idx.dtype(), idx.raw(), upd.raw(), c.out(0).raw(), e,
                   stream());
}

const bool kRegistered = register_kernels(cuda_device(0), {{"", "Gather", kernel(gather_node)},
                                                           {"", "GatherND", kernel(gather_nd_node)},
                                                           {"", "ScatterND", kernel(scatter_nd_node)},
                                                           {"", "GatherElements", kernel(gather_elements_node)},
                                                           {"", "ScatterElements", kernel(scatter_elements_node)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
