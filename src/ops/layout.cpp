// Ops that move data into a new layout: Transpose, Concat, Split, Slice,
// Expand, Tile, Pad, Trilu.
#include <cstring>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_copy.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

using kernels::contiguous_strides;
using kernels::dispatch_bytes;
using kernels::strided_copy;

class TransposeOp : public Op {
 public:
  explicit TransposeOp(const ir::Node& n) : perm_(n.attr_ints("perm")) {}
  bool recomputable() const override { return true; }
  std::vector<int64_t> perm(int64_t rank) const {
    if (!perm_.empty()) return perm_;
    auto p = std::vector<int64_t>(size_t(rank));
    for (int64_t i = 0; i < rank; ++i) p[size_t(i)] = rank - 1 - i;
    return p;
  }
  void infer(InferCtx& ctx) const override {
    auto p = perm(ctx.rank(0));
    if (int64_t(p.size()) != ctx.rank(0)) ctx.fail("perm has " + std::to_string(p.size()) + " entries for rank " + std::to_string(ctx.rank(0)));
    Shape out;
    for (auto a : p) out.push_back(ctx.shape(0).at(size_t(ctx.axis(a, ctx.rank(0)))));
    ctx.set(0, ctx.dtype(0), out);
  }
  void compute(ComputeCtx& c) const override {
    auto p = perm(c.in(0).rank());
    auto in_st = contiguous_strides(c.in(0).dims());
    std::vector<int64_t> st;
    for (auto a : p) st.push_back(in_st[size_t(a)]);
    dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      strided_copy(c.out(0).data<T>(), c.in(0).data<T>(), c.out(0).dims(), st);
    });
  }
  void grad(GradCtx& g) const override {
    auto p = perm(int64_t(g.x(0)->shape.size()));
    std::vector<int64_t> inv(p.size());
    for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i] < 0 ? p[i] + int64_t(p.size()) : p[i])] = int64_t(i);
    g.set_dx(0, g.op("Transpose", {g.dy(0)}, {{"perm", inv}}));
  }

 private:
  std::vector<int64_t> perm_;
};
OT_REGISTER_OP("Transpose", TransposeOp);

class ConcatOp : public Op {
 public:
  explicit ConcatOp(const ir::Node& n) : axis_(n.attr_int("axis")) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    int64_t r = ctx.rank(0);
    int64_t a = ctx.axis(axis_, r);
    Shape out = ctx.shape(0);
    out[size_t(a)] = Dim(0);
    bool have_values = r == 1;
    std::vector<Dim> values;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has(i)) continue;
      if (ctx.rank(i) != r) ctx.fail("input " + std::to_string(i) + " has rank " + std::to_string(ctx.rank(i)) + ", expected " + std::to_string(r));
      for (int64_t d = 0; d < r; ++d) {
        if (d == a) continue;
        const Dim &x = out[size_t(d)], &y = ctx.shape(i)[size_t(d)];
        if (x.is_const() && y.is_const() && x != y)
          ctx.fail("input " + std::to_string(i) + " shape " + shape_str(ctx.shape(i)) + " does not match " + shape_str(ctx.shape(0)) + " outside axis " + std::to_string(a));
        if (!x.is_const() && y.is_const()) out[size_t(d)] = y;
      }
      out[size_t(a)] = out[size_t(a)] + ctx.shape(i)[size_t(a)];
      auto* v = ctx.value(i);
      if (v) values.insert(values.end(), v->begin(), v->end());
      else have_values = false;
    }
    ctx.set(0, ctx.dtype(0), out, have_values ? std::optional(values) : std::nullopt);
  }
  void compute(ComputeCtx& c) const override {
    const auto& od = c.out(0).dims();
    int64_t a = axis_ < 0 ? axis_ + int64_t(od.size()) : axis_;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < a; ++i) outer *= od[size_t(i)];
    for (size_t i = size_t(a) + 1; i < od.size(); ++i) inner *= od[i];
    size_t es = dtype_size(c.out(0).dtype());
    char* o = static_cast<char*>(c.out(0).raw());
    int64_t out_row = od[size_t(a)] * inner, at = 0;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      if (!c.has(k)) continue;
      int64_t row = c.in(k).dims()[size_t(a)] * inner;
      const char* s = static_cast<const char*>(c.in(k).raw());
      for (int64_t i = 0; i < outer; ++i)
        std::memcpy(o + size_t(i * out_row + at) * es, s + size_t(i * row) * es, size_t(row) * es);
      at += row;
    }
  }
  void grad(GradCtx& g) const override {  // split the gradient at the inputs' sizes along the axis
    std::vector<ir::Value*> sizes;
    size_t n = g.node().inputs.size();
    int64_t r = int64_t(g.x(0)->shape.size()), a = axis_ < 0 ? axis_ + r : axis_;
    for (size_t i = 0; i < n; ++i) sizes.push_back(g.op("Gather", {g.shape(g.x(i)), g.ints({a})}));
    auto parts = g.ops("Split", {g.dy(0), g.op("Concat", sizes, {{"axis", int64_t(0)}})}, n, {{"axis", a}});
    for (size_t i = 0; i < n; ++i) g.set_dx(i, parts[i]);
  }

 private:
  int64_t axis_;
};
OT_REGISTER_OP("Concat", ConcatOp);

class SplitOp : public Op {
 public:
  explicit SplitOp(const ir::Node& n)
      : axis_(n.attr_int("axis", 0)), split_(n.attr_ints("split")) {}
  bool recomputable() const override { return true; }
  std::vector<Dim> sizes(InferCtx& ctx) const {
    int64_t a = ctx.axis(axis_, ctx.rank(0));
    Dim total = ctx.shape(0)[size_t(a)];
    size_t n = ctx.num_outputs();
    std::vector<Dim> s;
    if (!split_.empty()) s.assign(split_.begin(), split_.end());
    else if (ctx.has(1)) {
      auto* v = ctx.value(1);
      if (!v) ctx.unknown("split sizes");
      s = *v;
    } else if (total.is_const()) {  // equal parts, the last one smaller (opset 18)
      int64_t t = total.value(), k = int64_t(n), each = (t + k - 1) / k;
      for (int64_t i = 0; i < k; ++i) s.push_back(Dim(std::max<int64_t>(0, std::min(each, t - i * each))));
    } else {
      for (size_t i = 0; i < n; ++i) s.push_back(Dim::floor_div(total, Dim(int64_t(n))));
    }
    if (s.size() != n) ctx.fail("split has " + std::to_string(s.size()) + " sizes for " + std::to_string(n) + " outputs");
    Dim sum(0);
    for (auto& d : s) sum = sum + d;
    if (sum.is_const() && total.is_const() && sum != total)
      ctx.fail("split sizes sum to " + sum.str() + " but the axis has " + total.str());
    return s;
  }
  void infer(InferCtx& ctx) const override {
    auto s = sizes(ctx);
    int64_t a = ctx.axis(axis_, ctx.rank(0));
    for (size_t i = 0; i < s.size(); ++i) {
      Shape sh = ctx.shape(0);
      sh[size_t(a)] = s[i];
      ctx.set(i, ctx.dtype(0), sh);
    }
  }
  void compute(ComputeCtx& c) const override {
    const auto& id = c.in(0).dims();
    int64_t a = axis_ < 0 ? axis_ + int64_t(id.size()) : axis_;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < a; ++i) outer *= id[size_t(i)];
    for (size_t i = size_t(a) + 1; i < id.size(); ++i) inner *= id[i];
    size_t es = dtype_size(c.in(0).dtype());
    const char* s = static_cast<const char*>(c.in(0).raw());
    int64_t in_row = id[size_t(a)] * inner, at = 0;
    for (size_t k = 0; k < c.outputs.size(); ++k) {
      int64_t row = c.outputs[k] ? c.out(k).dims()[size_t(a)] * inner : 0;
      if (c.outputs[k]) {
        char* o = static_cast<char*>(c.out(k).raw());
        for (int64_t i = 0; i < outer; ++i)
          std::memcpy(o + size_t(i * row) * es, s + size_t(i * in_row + at) * es, size_t(row) * es);
      }
      at += row;
    }
  }
  void grad(GradCtx& g) const override {  // concatenate the outputs' gradients (zeros where none flowed)
    std::vector<ir::Value*> parts;
    for (size_t i = 0; i < g.node().outputs.size(); ++i) parts.push_back(g.dy(i) ? g.dy(i) : g.zeros_like(g.y(i)));
    g.set_dx(0, g.op("Concat", parts, {{"axis", axis_}}));
  }

 private:
  int64_t axis_;
  std::vector<int64_t> split_;  // the number of outputs says how many equal parts otherwise
};
OT_REGISTER_OP("Split", SplitOp);

// Slice: starts/ends/axes/steps from inputs (opset >= 10) or attributes.
class SliceOp : public Op {
 public:
  explicit SliceOp(const ir::Node& n)
      : starts_(n.attr_ints("starts")), ends_(n.attr_ints("ends")), axes_(n.attr_ints("axes")), from_attrs_(n.has_attr("starts")) {}
  bool recomputable() const override { return true; }

  struct Plan {
    std::vector<Dim> start, size;
    std::vector<int64_t> step;
  };
  Plan plan(InferCtx& ctx) const {
    int64_t r = ctx.rank(0);
    std::vector<Dim> starts, ends;
    std::vector<int64_t> axes, steps;
    if (from_attrs_) {
      starts.assign(starts_.begin(), starts_.end());
      ends.assign(ends_.begin(), ends_.end());
      axes = axes_;
    } else {
      auto* s = ctx.value(1);
      auto* e = ctx.value(2);
      if (!s || !e) ctx.unknown("starts and ends");
      starts = *s;
      ends = *e;
      if (ctx.has(3)) {
        auto v = ctx.int_values(3);
        if (!v) ctx.unknown("axes");
        axes = *v;
      }
      if (ctx.has(4)) {
        auto v = ctx.int_values(4);
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
      p.size.push_back(ctx.shape(0)[size_t(i)]);
      p.step.push_back(1);
    }
    for (size_t k = 0; k < axes.size(); ++k) {
      int64_t a = ctx.axis(axes[k], r);
      Dim dim = ctx.shape(0)[size_t(a)];
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
  void infer(InferCtx& ctx) const override {
    Plan p = plan(ctx);
    std::optional<std::vector<Dim>> v;
    const auto* in_v = ctx.value(0);
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
  // The gradient scatters dy to the positions the same Slice picks out of an
  // index tensor 0..numel(x)-1: exact for every start, end, axis and step.
  void grad(GradCtx& g) const override {
    ir::Value* x = g.x(0);
    std::vector<ir::Value*> in = g.node().inputs;
    in[0] = g.op("Reshape", {g.op("Range", {g.scalar(0, DType::kInt64), g.op("Size", {x}), g.scalar(1, DType::kInt64)}),
                             g.shape(x)});
    ir::Value* picked = g.op("Slice", in, g.node().attrs);
    g.set_dx(0, g.scatter_add_flat(x, picked, g.dy(0)));
  }
  void compute(ComputeCtx& c) const override {
    Plan p = plan(*c.shapes);
    auto in_st = contiguous_strides(c.in(0).dims());
    int64_t off = 0;
    std::vector<int64_t> st;
    for (size_t i = 0; i < in_st.size(); ++i) {
      off += p.start[i].value() * in_st[i];
      st.push_back(in_st[i] * p.step[i]);
    }
    dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      strided_copy(c.out(0).data<T>(), c.in(0).data<T>() + off, c.out(0).dims(), st);
    });
  }

 private:
  std::vector<int64_t> starts_, ends_, axes_;
  bool from_attrs_;
};

}  // namespace
}  // namespace onnxtrain::ops

namespace onnxtrain::ops {
namespace {

OT_REGISTER_OP("Slice", SliceOp);

class ExpandOp : public Op {
 public:
  explicit ExpandOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    auto* v = ctx.value(1);
    if (!v) ctx.unknown("the target shape");
    ctx.set(0, ctx.dtype(0), broadcast_shapes(ctx, ctx.shape(0), Shape(v->begin(), v->end())));
  }
  void compute(ComputeCtx& c) const override {
    const auto& od = c.out(0).dims();
    auto st = kernels::broadcast_strides(c.in(0).dims(), od);
    dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      strided_copy(c.out(0).data<T>(), c.in(0).data<T>(), od, st);
    });
  }
  void grad(GradCtx& g) const override { g.set_dx(0, g.dy(0)); }  // the engine sums the broadcast dims
};
OT_REGISTER_OP("Expand", ExpandOp);

class TileOp : public Op {
 public:
  explicit TileOp(const ir::Node&) {}
  void infer(InferCtx& ctx) const override {
    auto* v = ctx.value(1);
    if (!v) ctx.unknown("repeats");
    if (int64_t(v->size()) != ctx.rank(0)) ctx.fail("repeats has " + std::to_string(v->size()) + " entries for rank " + std::to_string(ctx.rank(0)));
    Shape out;
    for (size_t i = 0; i < v->size(); ++i) out.push_back(ctx.shape(0)[i] * (*v)[i]);
    ctx.set(0, ctx.dtype(0), out);
  }
  void compute(ComputeCtx& c) const override {
    // View the output as (r0, d0, r1, d1, ...) and copy the input with zero strides on r_i.
    const auto& id = c.in(0).dims();
    auto in_st = contiguous_strides(id);
    std::vector<int64_t> dims, st;
    for (size_t i = 0; i < id.size(); ++i) {
      dims.push_back(c.out(0).dims()[i] / std::max<int64_t>(id[i], 1));
      st.push_back(0);
      dims.push_back(id[i]);
      st.push_back(in_st[i]);
    }
    dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      strided_copy(c.out(0).data<T>(), c.in(0).data<T>(), dims, st);
    });
  }
  void grad(GradCtx& g) const override {  // every copy adds back to its source: tile the source positions
    ir::Value* x = g.x(0);
    ir::Value* positions = g.op("Reshape", {g.op("Range", {g.scalar(0, DType::kInt64), g.op("Size", {x}), g.scalar(1, DType::kInt64)}),
                                            g.shape(x)});
    g.set_dx(0, g.scatter_add_flat(x, g.op("Tile", {positions, g.x(1)}), g.dy(0)));
  }
};
OT_REGISTER_OP("Tile", TileOp);

class PadOp : public Op {
 public:
  explicit PadOp(const ir::Node& n)
      : mode_(n.attr_string("mode", "constant")), pads_attr_(n.attr_ints("pads")), value_attr_(n.attr_float("value", 0)),
        from_attr_(n.has_attr("pads")) {
    if (mode_ != "constant" && mode_ != "reflect" && mode_ != "edge" && mode_ != "wrap")
      throw UnsupportedError(n.where() + ": mode '" + mode_ + "' is not supported");
  }
  std::vector<Dim> pads(InferCtx& ctx) const {
    int64_t r = ctx.rank(0);
    std::vector<Dim> p;
    if (from_attr_) p.assign(pads_attr_.begin(), pads_attr_.end());
    else {
      auto* v = ctx.value(1);
      if (!v) ctx.unknown("pads");
      p = *v;
    }
    if (ctx.has(3)) {  // axes: expand to all dims
      auto axes = ctx.int_values(3);
      if (!axes) ctx.unknown("axes");
      std::vector<Dim> full(size_t(2 * r), Dim(0));
      size_t k = axes->size();
      if (p.size() != 2 * k) ctx.fail("pads has " + std::to_string(p.size()) + " entries for " + std::to_string(k) + " axes");
      for (size_t i = 0; i < k; ++i) {
        int64_t a = ctx.axis((*axes)[i], r);
        full[size_t(a)] = p[i];
        full[size_t(a + r)] = p[i + k];
      }
      p = full;
    }
    if (int64_t(p.size()) != 2 * r) ctx.fail("pads has " + std::to_string(p.size()) + " entries for rank " + std::to_string(r));
    return p;
  }
  void grad(GradCtx& g) const override {
    if (mode_ != "constant" || from_attr_ || g.node().input(3)) no_gradient(g);
    ir::Value* x = g.x(0);
    int64_t r = int64_t(x->shape.size());
    ir::Value* begins = g.op("Slice", {g.x(1), g.ints({0}), g.ints({r})});
    ir::Value* ends = g.add(begins, g.shape(x));
    g.set_dx(0, g.op("Slice", {g.dy(0), begins, ends}));
  }
  void infer(InferCtx& ctx) const override {
    auto p = pads(ctx);
    int64_t r = ctx.rank(0);
    Shape out;
    for (int64_t i = 0; i < r; ++i) out.push_back(ctx.shape(0)[size_t(i)] + p[size_t(i)] + p[size_t(i + r)]);
    ctx.set(0, ctx.dtype(0), out);
  }
  void compute(ComputeCtx& c) const override {
    auto pv = pads(*c.shapes);
    const auto& id = c.in(0).dims();
    const auto& od = c.out(0).dims();
    int64_t r = int64_t(id.size());
    auto before = std::vector<int64_t>(size_t(r));
    for (int64_t i = 0; i < r; ++i) before[size_t(i)] = pv[size_t(i)].value();
    auto in_st = contiguous_strides(id);
    int64_t n = c.out(0).numel();
    kernels::dispatch<kernels::kAll>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T fill = T(value_attr_);
      if (c.has(2) && c.in(2).numel()) fill = c.in(2).data<T>()[0];
      const T* x = c.in(0).data<T>();
      T* o = c.out(0).data<T>();
      for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, off = 0;
        bool inside = true;
        for (int64_t d = r - 1; d >= 0; --d) {
          int64_t q = rem % od[size_t(d)] - before[size_t(d)], size = id[size_t(d)];
          rem /= od[size_t(d)];
          if (q < 0 || q >= size) {
            if (mode_ == "constant" || size == 0) inside = false;
            else if (mode_ == "edge") q = q < 0 ? 0 : size - 1;
            else if (mode_ == "wrap") q = ((q % size) + size) % size;
            else {  // reflect, without repeating the edge
              int64_t period = 2 * (size - 1);
              q = period == 0 ? 0 : ((q % period) + period) % period;
              if (q >= size) q = period - q;
            }
          }
          off += q * in_st[size_t(d)];
        }
        o[i] = inside ? x[off] : fill;
      }
    });
  }

 private:
  std::string mode_;
  std::vector<int64_t> pads_attr_;
  float value_attr_;
  bool from_attr_;
};
OT_REGISTER_OP("Pad", PadOp);

class TriluOp : public Op {
 public:
  explicit TriluOp(const ir::Node& n) : upper_(n.attr_int("upper", 1)) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) < 2) ctx.fail("input must have rank >= 2, got " + shape_str(ctx.shape(0)));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
  }
  void compute(ComputeCtx& c) const override {
    int64_t k = c.has(1) ? c.in(1).to_int64()[0] : 0;
    const auto& d = c.in(0).dims();
    int64_t rows = d[d.size() - 2], cols = d[d.size() - 1], batch = c.in(0).numel() / std::max<int64_t>(rows * cols, 1);
    dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = c.in(0).data<T>();
      T* o = c.out(0).data<T>();
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            int64_t idx = (b * rows + i) * cols + j;
            bool keep = upper_ ? j - i >= k : j - i <= k;
            o[idx] = keep ? x[idx] : T(0);
          }
    });
  }
  int inplace_input() const override { return 0; }
  void grad(GradCtx& g) const override {
    std::vector<ir::Value*> in = {g.dy(0)};
    if (g.x(1)) in.push_back(g.x(1));
    g.set_dx(0, g.op("Trilu", in, {{"upper", int64_t(upper_)}}));
  }

 private:
  bool upper_;
};
OT_REGISTER_OP("Trilu", TriluOp);

}  // namespace
}  // namespace onnxtrain::ops
