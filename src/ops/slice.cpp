// Slice and its gradient, com.onnxtrain.SliceGrad.
#include <algorithm>

#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/layout.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

SliceAttrs slice_attrs(const ir::Node& n) {
  return {n.attr_ints("starts"), n.attr_ints("ends"), n.attr_ints("axes"), n.has_attr("starts")};
}

// Slice: starts/ends/axes/steps from inputs (opset >= 10) or attributes.
class SliceOp : public OpWith<SliceAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1, 2, 3, 4}); }
  explicit SliceOp(const ir::Node& n) : OpWith(slice_attrs(n)) {}
  bool recomputable() const override { return true; }

  void infer(InferCtx& ctx) const override {
    SliceAttrs::Plan p = attrs.plan(ctx, ctx.shape(0), 1);
    std::optional<std::vector<Dim>> v;
    const auto* in_v = ctx.propagated(0);
    if (in_v && ctx.rank(0) == 1 && p.start[0].is_const() && p.size[0].is_const()) {
      v.emplace();
      for (int64_t i = 0; i < p.size[0].value(); ++i) {
        int64_t idx = p.start[0].value() + i * p.step[0];
        if (idx < 0 || idx >= int64_t(in_v->size())) {
          v.reset();
          break;
        }
        v->push_back((*in_v)[size_t(idx)]);
      }
    }
    ctx.set(0, ctx.dtype(0), p.size, v);
  }
  // dX: zeros of X's shape with dY written where the Slice read (com.onnxtrain.SliceGrad, one pass: X's data is
  // not read, so the stash keeps none of it).
  void grad(GradCtx& g) const override {
    std::vector<ir::Value*> in = g.node().inputs;
    in[0] = g.shape(g.x(0));
    in.insert(in.begin(), g.dy(0));
    g.set_dx(0, g.ops("SliceGrad", in, 1, g.node().attrs, "com.onnxtrain")[0]);
  }
};

// com.onnxtrain.SliceGrad(dY, shape, starts, ends, axes, steps) -> dX: the Slice's attributes and inputs but its
// data, whose shape it is given instead.
class SliceGradOp : public OpWith<SliceAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1, 2, 3, 4, 5}); }
  explicit SliceGradOp(const ir::Node& n) : OpWith(slice_attrs(n)) {}
  void infer(InferCtx& ctx) const override {
    const std::vector<Dim>* shape = ctx.value(1);
    if (!shape) ctx.unknown("the shape");
    SliceAttrs::Plan p = attrs.plan(ctx, *shape, 2);
    if (ctx.rank(0) != int64_t(p.size.size()))
      ctx.fail("dY has rank " + std::to_string(ctx.rank(0)) + " for a shape of rank " + std::to_string(p.size.size()));
    ctx.set(0, ctx.dtype(0), *shape);
  }
};

const bool kRegistered = register_ops({
    {"", "Slice", factory<SliceOp>()},
    {"com.onnxtrain", "SliceGrad", factory<SliceGradOp>()},
});

}  // namespace

SliceAttrs::Plan SliceAttrs::plan(InferCtx& ctx, const Shape& in, size_t first) const {
  int64_t r = int64_t(in.size());
  std::vector<Dim> starts, ends;
  std::vector<int64_t> axes, steps;
  if (from_attrs) {
    starts.assign(this->starts.begin(), this->starts.end());
    ends.assign(this->ends.begin(), this->ends.end());
    axes = this->axes;
  } else {
    auto* s = ctx.value(first);
    auto* e = ctx.value(first + 1);
    if (!s || !e) ctx.unknown("starts and ends");
    starts = *s;
    ends = *e;
    if (ctx.has(first + 2)) {
      auto v = ctx.int_values(first + 2);
      if (!v) ctx.unknown("axes");
      axes = *v;
    }
    if (ctx.has(first + 3)) {
      auto v = ctx.int_values(first + 3);
      if (!v) ctx.unknown("steps");
      steps = *v;
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    ctx.fail("starts, ends, axes and steps differ in length");
  Plan p;
  for (int64_t i = 0; i < r; ++i) {
    p.start.push_back(Dim(0));
    p.size.push_back(in[size_t(i)]);
    p.step.push_back(1);
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t a = ctx.axis(axes[k], r);
    Dim dim = in[size_t(a)];
    int64_t step = steps[k];
    if (step == 0) ctx.fail("step is zero");
    Dim s = starts[k], e = ends[k];
    // Clamp like NumPy: negative indices count from the end.
    auto norm = [&](Dim x, int64_t lo_off, int64_t hi_off) {
      if (x.is_const() && x.value() < 0) x = dim + x;
      if (x.is_const() && x.value() <= -(int64_t(1) << 60)) return Dim(lo_off);
      if (x.is_const() && x.value() >= (int64_t(1) << 60)) return dim + Dim(hi_off);
      if (x.is_const() && dim.is_const()) return Dim(std::clamp(x.value(), lo_off, dim.value() + hi_off));
      if (x.is_const() && x.value() >= lo_off) return Dim::min(x, dim + Dim(hi_off));
      return Dim::max(Dim(lo_off), Dim::min(x, dim + Dim(hi_off)));
    };
    Dim size;
    if (step > 0) {
      s = norm(s, 0, 0);
      e = norm(e, 0, 0);
      size = Dim::max(Dim(0), Dim::ceil_div(e - s, Dim(step)));
    } else {
      s = norm(s, -1, -1);
      e = norm(e, -1, -1);
      size = Dim::max(Dim(0), Dim::ceil_div(s - e, Dim(-step)));
    }
    p.start[size_t(a)] = s;
    p.size[size_t(a)] = size;
    p.step[size_t(a)] = step;
  }
  return p;
}

}  // namespace onnxtrain::ops
