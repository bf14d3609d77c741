// Indexing ops: Gather, GatherElements, GatherND, ScatterND, ScatterElements,
// OneHot. Negative indices count from the end; out-of-range ones are errors.
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_copy.h"
#include "ops/axis_util.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

int64_t checked_index(const ComputeCtx& c, int64_t i, int64_t n) {
  if (i < -n || i >= n) c.fail("index " + std::to_string(i) + " is out of range for a dim of size " + std::to_string(n));
  return i < 0 ? i + n : i;
}

// GatherElements/ScatterElements: the data offset of position i of the index
// tensor (dims idx_dims), whose coordinate along `axis` is replaced by `index`.
int64_t element_offset(const ComputeCtx& c, int64_t i, const std::vector<int64_t>& idx_dims, const Tensor& x,
                       const std::vector<int64_t>& x_strides, int64_t axis, int64_t index) {
  int64_t off = 0;
  for (int64_t d = int64_t(idx_dims.size()) - 1; d >= 0; --d) {
    int64_t cd = i % idx_dims[size_t(d)];
    i /= idx_dims[size_t(d)];
    off += (d == axis ? checked_index(c, index, x.dims()[size_t(axis)]) : cd) * x_strides[size_t(d)];
  }
  return off;
}

class GatherOp : public Op {
 public:
  explicit GatherOp(const ir::Node& n) : axis_(n.attr_int("axis", 0)) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(axis_, ctx.rank(0));
    const Shape& d = ctx.shape(0);
    Shape out(d.begin(), d.begin() + a);
    out.insert(out.end(), ctx.shape(1).begin(), ctx.shape(1).end());
    out.insert(out.end(), d.begin() + a + 1, d.end());
    std::optional<std::vector<Dim>> v;
    auto* data = ctx.value(0);
    auto idx = ctx.int_values(1);
    if (data && idx && ctx.rank(0) == 1) {
      v.emplace();
      for (int64_t i : *idx) {
        int64_t n = int64_t(data->size());
        if (i < -n || i >= n) ctx.fail("index " + std::to_string(i) + " is out of range for a dim of size " + std::to_string(n));
        v->push_back((*data)[size_t(i < 0 ? i + n : i)]);
      }
    }
    ctx.set(0, ctx.dtype(0), out, v);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &x = c.in(0), &idx = c.in(1);
    int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
    AxisView v = axis_view(x.dims(), a);
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
  // Rows picked more than once (embeddings) accumulate: a scatter-add into zeros.
  void grad(GradCtx& g) const override {
    ir::Value *x = g.x(0), *idx = g.x(1), *dy = g.dy(0);
    int64_t r = int64_t(x->shape.size()), a = axis_ < 0 ? axis_ + r : axis_;
    ir::Value* zeros = g.zeros_like(x);
    if (a == 0) {
      g.set_dx(0, g.op("ScatterND", {zeros, g.op("Unsqueeze", {idx, g.ints({-1})}), dy}, {{"reduction", std::string("add")}}));
      return;
    }
    if (idx->shape.size() > 1) no_gradient(g);
    // One axis of indices: expand them over dy (x's rank) and scatter along the axis.
    ir::Value* dyr = dy;
    if (idx->shape.empty()) dyr = g.op("Unsqueeze", {dy, g.ints({a})});
    std::vector<int64_t> one(size_t(r), 1);
    one[size_t(a)] = -1;
    ir::Value* ind = g.op("Expand", {g.op("Reshape", {idx, g.ints(one)}), g.shape(dyr)});
    g.set_dx(0, g.op("ScatterElements", {zeros, ind, dyr}, {{"axis", a}, {"reduction", std::string("add")}}));
  }

 private:
  int64_t axis_;
};
OT_REGISTER_OP("Gather", GatherOp);

// Element offsets of every position of `dims` (row-major), with dim `axis` replaced by index values.
class GatherElementsOp : public Op {
 public:
  explicit GatherElementsOp(const ir::Node& n) : axis_(n.attr_int("axis", 0)) {}
  void infer(InferCtx& ctx) const override {
    ctx.axis(axis_, ctx.rank(0));
    if (ctx.rank(1) != ctx.rank(0)) ctx.fail("indices rank " + std::to_string(ctx.rank(1)) + " differs from data rank " + std::to_string(ctx.rank(0)));
    ctx.set(0, ctx.dtype(0), ctx.shape(1));
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &x = c.in(0), &idx = c.in(1);
    int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
    auto ind = idx.to_int64();
    const auto& id = idx.dims();
    auto xs = kernels::contiguous_strides(x.dims());
    size_t es = dtype_size(x.dtype());
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(c.out(0).raw());
    for (int64_t i = 0; i < int64_t(ind.size()); ++i) {
      int64_t off = element_offset(c, i, id, x, xs, a, ind[size_t(i)]);
      std::memcpy(dst + size_t(i) * es, src + size_t(off) * es, es);
    }
  }
  void grad(GradCtx& g) const override {
    g.set_dx(0, g.op("ScatterElements", {g.zeros_like(g.x(0)), g.x(1), g.dy(0)},
                     {{"axis", axis_}, {"reduction", std::string("add")}}));
  }

 private:
  int64_t axis_;
};
OT_REGISTER_OP("GatherElements", GatherElementsOp);

// ScatterElements (and the deprecated Scatter): data with updates written at indices along an axis.
class ScatterElementsOp : public Op {
 public:
  explicit ScatterElementsOp(const ir::Node& n) : axis_(n.attr_int("axis", 0)), reduction_(n.attr_string("reduction", "none")) {}
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
  void compute(ComputeCtx& c) const override {
    const Tensor &x = c.in(0), &idx = c.in(1), &upd = c.in(2);
    int64_t a = axis_ < 0 ? axis_ + x.rank() : axis_;
    auto ind = idx.to_int64();
    const auto& id = idx.dims();
    auto xs = kernels::contiguous_strides(x.dims());
    std::memcpy(c.out(0).raw(), x.raw(), x.nbytes());
    kernels::dispatch<kernels::kAll>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = c.out(0).data<T>();
      const T* u = upd.data<T>();
      for (int64_t i = 0; i < int64_t(ind.size()); ++i) {
        int64_t off = element_offset(c, i, id, x, xs, a, ind[size_t(i)]);
        o[off] = combine(o[off], u[i]);
      }
    });
  }

  // Without a reduction: the data's gradient is dy with the overwritten places
  // zeroed; the updates' gradient is dy read back at those places.
  void grad(GradCtx& g) const override {
    if (reduction_ != "none") no_gradient(g);
    bool nd = g.node().op_type == "ScatterND";
    ir::Value *idx = g.x(1), *dy = g.dy(0);
    ir::Attributes axis = {{"axis", axis_}};
    if (g.needs(0)) g.set_dx(0, g.op(g.node().op_type, {dy, idx, g.zeros_like(g.x(2))}, nd ? ir::Attributes{} : axis));
    if (g.needs(2)) g.set_dx(2, nd ? g.op("GatherND", {dy, idx}) : g.op("GatherElements", {dy, idx}, axis));
  }

  template <typename T>
  T combine(T old, T v) const {
    if (reduction_ == "add") return T(old + v);
    if (reduction_ == "mul") return T(old * v);
    if (reduction_ == "max") return old > v ? old : v;
    if (reduction_ == "min") return old < v ? old : v;
    return v;
  }

 protected:
  int64_t axis_;
  std::string reduction_;
};
OT_REGISTER_OP("ScatterElements", ScatterElementsOp);
OT_REGISTER_OP("Scatter", ScatterElementsOp);

class ScatterNDOp : public ScatterElementsOp {
 public:
  explicit ScatterNDOp(const ir::Node& n) : ScatterElementsOp(n) {}
  void compute(ComputeCtx& c) const override {
    const Tensor &x = c.in(0), &idx = c.in(1), &upd = c.in(2);
    auto ind = idx.to_int64();
    int64_t k = idx.dims().back(), n_upd = idx.numel() / std::max<int64_t>(k, 1);
    int64_t slice = 1;
    for (size_t d = size_t(k); d < x.dims().size(); ++d) slice *= x.dims()[d];
    auto xs = kernels::contiguous_strides(x.dims());
    std::memcpy(c.out(0).raw(), x.raw(), x.nbytes());
    kernels::dispatch<kernels::kAll>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = c.out(0).data<T>();
      const T* u = upd.data<T>();
      for (int64_t i = 0; i < n_upd; ++i) {
        int64_t off = 0;
        for (int64_t d = 0; d < k; ++d) off += checked_index(c, ind[size_t(i * k + d)], x.dims()[size_t(d)]) * xs[size_t(d)];
        for (int64_t j = 0; j < slice; ++j) o[off + j] = combine(o[off + j], u[i * slice + j]);
      }
    });
  }
};
OT_REGISTER_OP("ScatterND", ScatterNDOp);

class GatherNDOp : public Op {
 public:
  explicit GatherNDOp(const ir::Node& n) : batch_dims_(n.attr_int("batch_dims", 0)) {}
  void grad(GradCtx& g) const override {
    if (batch_dims_ != 0) no_gradient(g);
    g.set_dx(0, g.op("ScatterND", {g.zeros_like(g.x(0)), g.x(1), g.dy(0)}, {{"reduction", std::string("add")}}));
  }
  void infer(InferCtx& ctx) const override {
    const Shape &d = ctx.shape(0), &i = ctx.shape(1);
    if (!i.back().is_const()) ctx.unknown("the index depth");
    int64_t k = i.back().value();
    if (batch_dims_ + k > ctx.rank(0)) ctx.fail("index depth " + std::to_string(k) + " exceeds the data rank");
    Shape out(i.begin(), i.end() - 1);
    out.insert(out.end(), d.begin() + batch_dims_ + k, d.end());
    ctx.set(0, ctx.dtype(0), out);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &x = c.in(0), &idx = c.in(1);
    auto ind = idx.to_int64();
    int64_t k = idx.dims().back(), b = batch_dims_;
    int64_t batch = 1;
    for (int64_t d = 0; d < b; ++d) batch *= x.dims()[size_t(d)];
    int64_t per_batch = idx.numel() / std::max<int64_t>(k, 1) / std::max<int64_t>(batch, 1);
    int64_t slice = 1;
    for (size_t d = size_t(b + k); d < x.dims().size(); ++d) slice *= x.dims()[d];
    auto xs = kernels::contiguous_strides(x.dims());
    int64_t batch_stride = b > 0 ? xs[size_t(b - 1)] : 0;
    size_t es = dtype_size(x.dtype());
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(c.out(0).raw());
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t i = 0; i < per_batch; ++i) {
        int64_t row = bi * per_batch + i, off = bi * batch_stride;
        for (int64_t d = 0; d < k; ++d) off += checked_index(c, ind[size_t(row * k + d)], x.dims()[size_t(b + d)]) * xs[size_t(b + d)];
        std::memcpy(dst + size_t(row * slice) * es, src + size_t(off) * es, size_t(slice) * es);
      }
  }

 private:
  int64_t batch_dims_;
};
OT_REGISTER_OP("GatherND", GatherNDOp);

class OneHotOp : public Op {
 public:
  explicit OneHotOp(const ir::Node& n) : axis_(n.attr_int("axis", -1)) {}
  DType output_dtype(size_t, const std::vector<DType>& in) const override { return in.at(2); }
  void infer(InferCtx& ctx) const override {
    auto* depth = ctx.value(1);
    Dim d;
    if (depth && depth->size() == 1) d = (*depth)[0];
    else if (ctx.tensor(1)) d = Dim(int64_t(ctx.tensor(1)->to_double()[0]));
    else ctx.unknown("depth");
    Shape out = ctx.shape(0);
    int64_t a = ctx.axis(axis_, ctx.rank(0) + 1);
    out.insert(out.begin() + a, d);
    ctx.set(0, ctx.dtype(2), out);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& idx = c.in(0);
    int64_t r = idx.rank() + 1, a = axis_ < 0 ? axis_ + r : axis_;
    int64_t depth = int64_t(c.in(1).to_double()[0]);
    auto ind = idx.to_double();
    AxisView v = axis_view(c.out(0).dims(), a);
    size_t es = dtype_size(c.in(2).dtype());
    const char* vals = static_cast<const char*>(c.in(2).raw());
    char* o = static_cast<char*>(c.out(0).raw());
    for (int64_t p = 0; p < v.outer; ++p)
      for (int64_t j = 0; j < depth; ++j)
        for (int64_t q = 0; q < v.inner; ++q) {
          int64_t i = int64_t(ind[size_t(p * v.inner + q)]);
          if (i < 0) i += depth;
          std::memcpy(o + size_t((p * depth + j) * v.inner + q) * es, vals + (i == j ? es : 0), es);
        }
  }

 private:
  int64_t axis_;
};
OT_REGISTER_OP("OneHot", OneHotOp);

}  // namespace
}  // namespace onnxtrain::ops
