// Indexing ops: Gather, GatherElements, GatherND, ScatterND, ScatterElements, OneHot. Negative indices count
// from the end; out-of-range ones are errors.
#include "ops/indexing.h"

#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/elements_shape.h"
#include "kernels/kernel.h"
#include "ops/axis_util.h"

namespace onnxtrain::kernels {
namespace {

using Reduction = ops::IndexAttrs::Reduction;

int64_t checked_index(const KernelCtx& c, int64_t i, int64_t n) {
  if (i < -n || i >= n)
    c.fail("index " + std::to_string(i) + " is out of range for a dim of size " + std::to_string(n));
  return i < 0 ? i + n : i;
}

// GatherElements/ScatterElements: the data offset of position i of the index
// tensor (dims idx_dims), whose coordinate along `axis` is replaced by `index`.
int64_t element_offset(const KernelCtx& c, int64_t i, const std::vector<int64_t>& idx_dims, const Tensor& x,
                       const std::vector<int64_t>& x_strides, int64_t axis, int64_t index) {
  int64_t off = 0;
  for (int64_t d = int64_t(idx_dims.size()) - 1; d >= 0; --d) {
    int64_t cd = i % idx_dims[size_t(d)];
    i /= idx_dims[size_t(d)];
    off += (d == axis ? checked_index(c, index, x.dims()[size_t(axis)]) : cd) * x_strides[size_t(d)];
  }
  return off;
}

template <typename T>
T combine(Reduction r, T old, T v) {
  switch (r) {
    case Reduction::kAdd:
      return T(old + v);
    case Reduction::kMul:
      return T(old * v);
    case Reduction::kMax:
      return old > v ? old : v;
    case Reduction::kMin:
      return old < v ? old : v;
    case Reduction::kNone:
      break;
  }
  return v;
}

void gather(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &idx = c.in(1);
  int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  ops::AxisView v = ops::axis_view(x.dims(), a);
  auto ind = idx.to_int64();
  size_t es = dtype_size(x.dtype());
  size_t row = size_t(v.inner) * es;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(c.out(0).raw());
  int64_t ni = int64_t(ind.size());
  for (auto& i : ind) i = checked_index(c, i, v.n);
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t j = 0; j < ni; ++j)
      std::memcpy(dst + size_t(o * ni + j) * row, src + size_t(o * v.n + ind[size_t(j)]) * row, row);
}

void gather_elements(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &idx = c.in(1);
  int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  check_elements_shape(c, idx, x, a);
  auto ind = idx.to_int64();
  const auto& id = idx.dims();
  auto xs = contiguous_strides(x.dims());
  size_t es = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(c.out(0).raw());
  for (int64_t i = 0; i < int64_t(ind.size()); ++i) {
    int64_t off = element_offset(c, i, id, x, xs, a, ind[size_t(i)]);
    std::memcpy(dst + size_t(i) * es, src + size_t(off) * es, es);
  }
}

void scatter_elements(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &idx = c.in(1), &upd = c.in(2);
  int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  check_elements_shape(c, idx, x, a);
  auto ind = idx.to_int64();
  const auto& id = idx.dims();
  if (upd.dims() != id) c.fail("updates " + dims_str(upd.dims()) + " are not shaped as indices " + dims_str(id));
  auto xs = contiguous_strides(x.dims());
  if (c.out(0).raw() != x.raw()) std::memcpy(c.out(0).raw(), x.raw(), x.nbytes());  // (else in place)
  dispatch<kAll>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = c.out(0).data<T>();
    const T* u = upd.data<T>();
    for (int64_t i = 0; i < int64_t(ind.size()); ++i) {
      int64_t off = element_offset(c, i, id, x, xs, a, ind[size_t(i)]);
      o[off] = combine(at.reduction, o[off], u[i]);
    }
  });
}

void scatter_nd(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &idx = c.in(1), &upd = c.in(2);
  auto ind = idx.to_int64();
  if (idx.rank() == 0 || idx.dims().back() > x.rank())
    c.fail("indices " + dims_str(idx.dims()) + " do not index data " + dims_str(x.dims()));
  int64_t k = idx.dims().back(), n_upd = idx.numel() / std::max<int64_t>(k, 1);
  int64_t slice = 1;
  for (size_t d = size_t(k); d < x.dims().size(); ++d) slice *= x.dims()[d];
  if (upd.numel() != n_upd * slice)
    c.fail("updates " + dims_str(upd.dims()) + " do not fit indices " + dims_str(idx.dims()) + " into data " +
           dims_str(x.dims()));
  auto xs = contiguous_strides(x.dims());
  if (c.out(0).raw() != x.raw()) std::memcpy(c.out(0).raw(), x.raw(), x.nbytes());  // (else in place)
  dispatch<kAll>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = c.out(0).data<T>();
    const T* u = upd.data<T>();
    for (int64_t i = 0; i < n_upd; ++i) {
      int64_t off = 0;
      for (int64_t d = 0; d < k; ++d)
        off += checked_index(c, ind[size_t(i * k + d)], x.dims()[size_t(d)]) * xs[size_t(d)];
      for (int64_t j = 0; j < slice; ++j) o[off + j] = combine(at.reduction, o[off + j], u[i * slice + j]);
    }
  });
}

void gather_nd(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor &x = c.in(0), &idx = c.in(1);
  auto ind = idx.to_int64();
  if (idx.rank() == 0 || at.batch_dims < 0 || at.batch_dims + idx.dims().back() > x.rank())
    c.fail("indices " + dims_str(idx.dims()) + " do not index data " + dims_str(x.dims()) + " past " +
           std::to_string(at.batch_dims) + " batch dims");
  int64_t k = idx.dims().back(), b = at.batch_dims;
  int64_t batch = 1;
  for (int64_t d = 0; d < b; ++d) batch *= x.dims()[size_t(d)];
  int64_t per_batch = idx.numel() / std::max<int64_t>(k, 1) / std::max<int64_t>(batch, 1);
  int64_t slice = 1;
  for (size_t d = size_t(b + k); d < x.dims().size(); ++d) slice *= x.dims()[d];
  if (c.out(0).numel() != batch * per_batch * slice)
    c.fail("output " + dims_str(c.out(0).dims()) + " does not hold what indices " + dims_str(idx.dims()) +
           " gather from data " + dims_str(x.dims()));
  auto xs = contiguous_strides(x.dims());
  int64_t batch_stride = b > 0 ? xs[size_t(b - 1)] : 0;
  size_t es = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(c.out(0).raw());
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < per_batch; ++i) {
      int64_t row = bi * per_batch + i, off = bi * batch_stride;
      for (int64_t d = 0; d < k; ++d)
        off += checked_index(c, ind[size_t(row * k + d)], x.dims()[size_t(b + d)]) * xs[size_t(b + d)];
      std::memcpy(dst + size_t(row * slice) * es, src + size_t(off) * es, size_t(slice) * es);
    }
}

void one_hot(const ops::IndexAttrs& at, KernelCtx& c) {
  const Tensor& idx = c.in(0);
  int64_t r = idx.rank() + 1, a = at.axis < 0 ? at.axis + r : at.axis;
  int64_t depth = c.out(0).dims()[size_t(a)];  // the depth input, as shape inference read it
  auto ind = idx.to_double();
  if (c.in(2).numel() != 2) c.fail("values " + dims_str(c.in(2).dims()) + " are not (off, on)");
  ops::AxisView v = ops::axis_view(c.out(0).dims(), a);
  size_t es = dtype_size(c.in(2).dtype());
  const char* vals = static_cast<const char*>(c.in(2).raw());
  char* o = static_cast<char*>(c.out(0).raw());
  for (int64_t p = 0; p < v.outer; ++p)
    for (int64_t j = 0; j < depth; ++j)
      for (int64_t q = 0; q < v.inner; ++q) {
        int64_t i = from_double<int64_t>(ind[size_t(p * v.inner + q)]);
        if (i < 0) i += depth;
        std::memcpy(o + size_t((p * depth + j) * v.inner + q) * es, vals + (i == j ? es : 0), es);
      }
}

const bool kRegistered = register_kernels(kCpu, {
                                                    {"", "Gather", kernel(gather)},
                                                    {"", "GatherElements", kernel(gather_elements)},
                                                    {"", "ScatterElements", kernel(scatter_elements)},
                                                    {"", "Scatter", kernel(scatter_elements)},
                                                    {"", "ScatterND", kernel(scatter_nd)},
                                                    {"", "GatherND", kernel(gather_nd)},
                                                    {"", "OneHot", kernel(one_hot)},
                                                });

}  // namespace
}  // namespace onnxtrain::kernels
