// Indexing ops: Gather, GatherElements, GatherND, ScatterND, ScatterElements,
// OneHot. Negative indices count from the end; out-of-range ones are errors.
#include "ops/indexing.h"

#include <map>

#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

IndexAttrs index_attrs(const ir::Node& n) {
  std::string r = n.attr_string("reduction", "none");
  using R = IndexAttrs::Reduction;
  static const std::map<std::string, R> reductions = {
      {"none", R::kNone}, {"add", R::kAdd}, {"mul", R::kMul}, {"max", R::kMax}, {"min", R::kMin}};
  auto it = reductions.find(r);
  if (it == reductions.end()) throw ModelError(n.where() + ": reduction '" + r + "' is not none, add, mul, max or min");
  return {n.attr_int("axis", n.op_type == "OneHot" ? -1 : 0), it->second, n.attr_int("batch_dims", 0)};
}

class IndexOp : public OpWith<IndexAttrs> {
 public:
  explicit IndexOp(const ir::Node& n) : OpWith(index_attrs(n)) {}
};

class GatherOp : public IndexOp {
 public:
  using IndexOp::IndexOp;
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(attrs.axis, ctx.rank(0));
    const Shape& d = ctx.shape(0);
    Shape out(d.begin(), d.begin() + a);
    out.insert(out.end(), ctx.shape(1).begin(), ctx.shape(1).end());
    out.insert(out.end(), d.begin() + a + 1, d.end());
    std::optional<std::vector<Dim>> v;
    auto* data = ctx.propagated(0);
    auto idx = data ? ctx.int_values(1) : std::nullopt;  // before a run only, as data
    if (data && idx && ctx.rank(0) == 1) {
      v.emplace();
      for (int64_t i : *idx) {
        int64_t n = int64_t(data->size());
        if (i < -n || i >= n)
          ctx.fail("index " + std::to_string(i) + " is out of range for a dim of size " + std::to_string(n));
        v->push_back((*data)[size_t(i < 0 ? i + n : i)]);
      }
    }
    ctx.set(0, ctx.dtype(0), out, v);
  }
  // Rows picked more than once (embeddings) accumulate: a scatter-add into zeros.
  void grad(GradCtx& g) const override {
    ir::Value *x = g.x(0), *idx = g.x(1), *dy = g.dy(0);
    int64_t r = int64_t(x->shape.size()), a = attrs.axis < 0 ? attrs.axis + r : attrs.axis;
    ir::Value* zeros = g.zeros_like(x);
    if (a == 0) {
      g.set_dx(0, g.op("ScatterND", {zeros, g.unsqueeze(idx, {-1}), dy}, {{"reduction", std::string("add")}}));
      return;
    }
    if (idx->shape.size() > 1) no_gradient(g);
    // One axis of indices: expand them over dy (x's rank) and scatter along the axis.
    ir::Value* dyr = dy;
    if (idx->shape.empty()) dyr = g.unsqueeze(dy, {a});
    std::vector<int64_t> one(size_t(r), 1);
    one[size_t(a)] = -1;
    ir::Value* ind = g.expand(g.reshape(idx, g.ints(one)), g.shape(dyr));
    g.set_dx(0, g.op("ScatterElements", {zeros, ind, dyr}, {{"axis", a}, {"reduction", std::string("add")}}));
  }
};

// Element offsets of every position of `dims` (row-major), with dim `axis` replaced by index values.
class GatherElementsOp : public IndexOp {
 public:
  using IndexOp::IndexOp;
  void infer(InferCtx& ctx) const override {
    ctx.axis(attrs.axis, ctx.rank(0));
    if (ctx.rank(1) != ctx.rank(0))
      ctx.fail("indices rank " + std::to_string(ctx.rank(1)) + " differs from data rank " +
               std::to_string(ctx.rank(0)));
    ctx.set(0, ctx.dtype(0), ctx.shape(1));
  }
  void grad(GradCtx& g) const override {
    g.set_dx(0, g.op("ScatterElements", {g.zeros_like(g.x(0)), g.x(1), g.dy(0)},
                     {{"axis", attrs.axis}, {"reduction", std::string("add")}}));
  }
};

// ScatterElements (and the deprecated Scatter): data with updates written at indices along an axis.
class ScatterElementsOp : public IndexOp {
 public:
  using IndexOp::IndexOp;
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
  int inplace_input() const override { return 0; }  // the data, updated where it lies

  // Without a reduction: the data's gradient is dy with the overwritten places
  // zeroed; the updates' gradient is dy read back at those places.
  void grad(GradCtx& g) const override {
    if (attrs.reduction != IndexAttrs::Reduction::kNone) no_gradient(g);
    bool nd = g.node().op_type == "ScatterND";
    ir::Value *idx = g.x(1), *dy = g.dy(0);
    ir::Attributes axis = {{"axis", attrs.axis}};
    if (g.needs(0)) g.set_dx(0, g.op(g.node().op_type, {dy, idx, g.zeros_like(g.x(2))}, nd ? ir::Attributes{} : axis));
    if (g.needs(2)) g.set_dx(2, nd ? g.op("GatherND", {dy, idx}) : g.op("GatherElements", {dy, idx}, axis));
  }
};

class GatherNDOp : public IndexOp {
 public:
  using IndexOp::IndexOp;
  void grad(GradCtx& g) const override {
    if (attrs.batch_dims != 0) no_gradient(g);
    g.set_dx(0, g.op("ScatterND", {g.zeros_like(g.x(0)), g.x(1), g.dy(0)}, {{"reduction", std::string("add")}}));
  }
  void infer(InferCtx& ctx) const override {
    const Shape &d = ctx.shape(0), &i = ctx.shape(1);
    if (i.empty()) ctx.fail("indices are a scalar; they need a last dim, the index depth");
    if (!i.back().is_const()) ctx.unknown("the index depth");
    int64_t k = i.back().value();
    if (attrs.batch_dims < 0 || k < 0 || attrs.batch_dims + k > ctx.rank(0) || attrs.batch_dims >= ctx.rank(1))
      ctx.fail("index depth " + std::to_string(k) + " after " + std::to_string(attrs.batch_dims) +
               " batch dims does not fit data of rank " + std::to_string(ctx.rank(0)));
    Shape out(i.begin(), i.end() - 1);
    out.insert(out.end(), d.begin() + attrs.batch_dims + k, d.end());
    ctx.set(0, ctx.dtype(0), out);
  }
};

class OneHotOp : public IndexOp {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  using IndexOp::IndexOp;
  DType output_dtype(size_t, const std::vector<DType>& in) const override { return in.at(2); }
  void infer(InferCtx& ctx) const override {
    auto* depth = ctx.value(1);
    Dim d;
    if (depth && depth->size() == 1)
      d = (*depth)[0];
    else if (ctx.tensor(1))
      d = Dim(int64_t(ctx.tensor(1)->to_double()[0]));
    else
      ctx.unknown("depth");
    Shape out = ctx.shape(0);
    int64_t a = ctx.axis(attrs.axis, ctx.rank(0) + 1);
    out.insert(out.begin() + a, d);
    ctx.set(0, ctx.dtype(2), out);
  }
};

const bool kRegistered = register_ops({
    {"", "Gather", factory<GatherOp>()},
    {"", "GatherElements", factory<GatherElementsOp>()},
    {"", "ScatterElements", factory<ScatterElementsOp>()},
    {"", "Scatter", factory<ScatterElementsOp>()},
    {"", "ScatterND", factory<ScatterElementsOp>()},
    {"", "GatherND", factory<GatherNDOp>()},
    {"", "OneHot", factory<OneHotOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
