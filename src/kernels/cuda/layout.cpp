// The CUDA kernels of the ops that move data (Transpose, Expand, Slice and its gradient, Concat, Split, Trilu, Pad)
// and of Shape and Size, whose values reach the device as kernel arguments: no host buffer, no copy.
#include <cstring>

#include "kernels/cuda/indexing.h"
#include "kernels/strides.h"
#include "ops/layout.h"
#include "ops/shape_ops.h"
#include "ops/shape_util.h"

namespace onnxtrain::kernels::cuda {
namespace {

int elem_bytes(const Tensor& t) { return int(dtype_size(t.dtype())); }

void transpose(const ops::TransposeAttrs& at, KernelCtx& c) {
  auto p = at.resolved(c.in(0).rank());
  auto in_st = contiguous_strides(c.in(0).dims());
  std::vector<int64_t> st;
  for (auto a : p) st.push_back(in_st[size_t(a)]);
  const auto& od = c.out(0).dims();
  strided_copy(elem_bytes(c.in(0)), c.in(0).raw(), c.out(0).raw(), indexing(c, od, {contiguous_strides(od), st}),
               stream());
}

void expand(KernelCtx& c) {
  const auto& od = c.out(0).dims();
  Indexing ix = indexing(c, od, {contiguous_strides(od), broadcast_strides(c.in(0).dims(), od)});
  strided_copy(elem_bytes(c.in(0)), c.in(0).raw(), c.out(0).raw(), ix, stream());
}

// Where a Slice's window of data of `dims` starts, and its element strides (as kernels/cpu/slice.cpp).
std::pair<int64_t, std::vector<int64_t>> window(const ops::SliceAttrs& at, KernelCtx& c,
                                                const std::vector<int64_t>& dims, size_t first) {
  ops::SliceAttrs::Plan p = at.plan(*c.shapes, const_shape(dims), first);
  auto st = contiguous_strides(dims);
  int64_t offset = 0;
  std::vector<int64_t> strides;
  for (size_t i = 0; i < st.size(); ++i) {
    offset += p.start[i].value() * st[i];
    strides.push_back(st[i] * p.step[i]);
  }
  return {offset, strides};
}

void slice(const ops::SliceAttrs& at, KernelCtx& c) {
  auto [offset, strides] = window(at, c, c.in(0).dims(), 1);
  const auto& od = c.out(0).dims();
  const int es = elem_bytes(c.in(0));
  strided_copy(es, static_cast<const char*>(c.in(0).raw()) + offset * es, c.out(0).raw(),
               indexing(c, od, {contiguous_strides(od), strides}), stream());
}

void slice_grad(const ops::SliceAttrs& at, KernelCtx& c) {
  auto [offset, strides] = window(at, c, c.out(0).dims(), 2);
  zero(c.out(0).raw(), c.out(0).nbytes());
  const auto& id = c.in(0).dims();
  const int es = elem_bytes(c.in(0));
  strided_copy(es, c.in(0).raw(), static_cast<char*>(c.out(0).raw()) + offset * es,
               indexing(c, id, {strides, contiguous_strides(id)}), stream());
}

void concat(const ops::AxisAttrs& at, KernelCtx& c) {
  const auto& od = c.out(0).dims();
  const size_t a = size_t(at.axis < 0 ? at.axis + int64_t(od.size()) : at.axis);
  const auto out_st = contiguous_strides(od);
  const int es = elem_bytes(c.out(0));
  int64_t pos = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    if (!c.has(k)) continue;
    const auto& id = c.in(k).dims();
    strided_copy(es, c.in(k).raw(), static_cast<char*>(c.out(0).raw()) + pos * out_st[a] * es,
                 indexing(c, id, {out_st, contiguous_strides(id)}), stream());
    pos += id[a];
  }
}

void split(const ops::SplitAttrs& at, KernelCtx& c) {
  const auto& id = c.in(0).dims();
  const size_t a = size_t(at.axis < 0 ? at.axis + int64_t(id.size()) : at.axis);
  const auto in_st = contiguous_strides(id);
  const int es = elem_bytes(c.in(0));
  int64_t pos = 0;
  for (size_t k = 0; k < c.shapes->num_outputs(); ++k) {  // (an output the node omits still takes its part)
    const auto od = ops::concrete(c.node, c.shapes->outputs()[k].shape);
    if (c.wants(k))
      strided_copy(es, static_cast<const char*>(c.in(0).raw()) + pos * in_st[a] * es, c.out(k).raw(),
                   indexing(c, od, {contiguous_strides(od), in_st}), stream());
    pos += od[a];
  }
}

void trilu(const ops::TriluAttrs& at, KernelCtx& c) {
  const int64_t k = c.has(1) ? c.in(1).to_int64().at(0) : 0;
  const auto& d = c.in(0).dims();
  const int64_t rows = d[d.size() - 2], cols = d.back();
  const int64_t batch = rows * cols != 0 ? c.in(0).numel() / (rows * cols) : 0;
  cuda::trilu(elem_bytes(c.in(0)), c.in(0).raw(), c.out(0).raw(), batch, rows, cols, k, at.upper, stream());
}

void write(KernelCtx& c, const std::vector<int64_t>& values) {
  int64_t v[kMaxRank] = {};
  if (values.size() > size_t(kMaxRank)) {  // past the kernel argument's room: from the host
    check(cudaMemcpyAsync(c.out(0).raw(), values.data(), values.size() * sizeof(int64_t), cudaMemcpyHostToDevice,
                          stream()),
          "cudaMemcpyAsync");
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) v[i] = values[i];
  write_int64(v, int(values.size()), c.out(0).data<int64_t>(), stream());
}

void shape(const ops::ShapeAttrs& at, KernelCtx& c) {
  auto [s, e] = at.range(c.in(0).rank());
  write(c, std::vector<int64_t>(c.in(0).dims().begin() + s, c.in(0).dims().begin() + e));
}

void size(KernelCtx& c) { write(c, {c.in(0).numel()}); }

// The pads resolved as shape inference did (attribute, or the pads and axes inputs, read on the host), and the
// constant (attribute, or the constant_value input, on the host).
void pad_node(const ops::PadAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  const std::vector<Dim> pads = at.resolved(*c.shapes);
  PadShape p;
  p.rank = int(x.rank());
  if (p.rank > kMaxRank) throw UnsupportedError(c.node.where() + ": more than 8 dims");
  p.mode = int(at.mode);
  for (int d = 0; d < p.rank; ++d)
    p.out[d] = c.out(0).dims()[size_t(d)], p.in[d] = x.dims()[size_t(d)], p.before[d] = pads[size_t(d)].value();
  const size_t bytes = dtype_size(x.dtype());
  uint64_t value = 0;
  if (c.has(2) && c.in(2).numel()) {
    std::memcpy(&value, c.in(2).raw(), bytes);
  } else if (at.value != 0.f) {  // (the attribute of opsets before 11: a float constant)
    const float f = at.value;
    const double d = f;
    const int64_t i = int64_t(f);
    const Half h(f);
    const BFloat16 b(f);
    const void* from = x.dtype() == DType::kFloat32    ? static_cast<const void*>(&f)
                       : x.dtype() == DType::kFloat64  ? static_cast<const void*>(&d)
                       : x.dtype() == DType::kFloat16  ? static_cast<const void*>(&h)
                       : x.dtype() == DType::kBFloat16 ? static_cast<const void*>(&b)
                       : x.dtype() == DType::kInt64    ? static_cast<const void*>(&i)
                                                       : nullptr;
    if (!from) throw UnsupportedError(c.node.where() + ": a constant attribute for " + dtype_name(x.dtype()));
    std::memcpy(&value, from, bytes);
  }
  pad(int(bytes), x.raw(), c.out(0).raw(), p, value, stream());
}

const bool kRegistered = register_kernels(cuda_device(0), {{"", "Transpose", kernel(transpose)},
                                                           {"", "Expand", kernel(expand)},
                                                           {"", "Slice", kernel(slice)},
                                                           {"com.onnxtrain", "SliceGrad", kernel(slice_grad)},
                                                           {"", "Concat", kernel(concat)},
                                                           {"", "Split", kernel(split)},
                                                           {"", "Trilu", kernel(trilu)},
                                                           {"", "Pad", kernel(pad_node)},
                                                           {"", "Shape", kernel(shape)},
                                                           {"", "Size", kernel(size)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
