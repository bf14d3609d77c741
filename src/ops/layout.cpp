// Ops that move data into a new layout: Transpose, Concat, Split, Expand, Tile, Pad, Trilu (Slice: slice.cpp).
#include "ops/layout.h"

#include <algorithm>
#include <map>

#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

class TransposeOp : public OpWith<TransposeAttrs> {
 public:
  explicit TransposeOp(const ir::Node& n) : OpWith({n.attr_ints("perm")}) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    auto p = attrs.resolved(ctx.rank(0));
    if (int64_t(p.size()) != ctx.rank(0))
      ctx.fail("perm has " + std::to_string(p.size()) + " entries for rank " + std::to_string(ctx.rank(0)));
    std::vector<bool> seen(p.size());
    for (auto a : p) {
      if (a < 0 || a >= ctx.rank(0) || seen[size_t(a)])
        ctx.fail("perm " + dims_str(p) + " is not a permutation of the " + std::to_string(ctx.rank(0)) + " axes");
      seen[size_t(a)] = true;
    }
    Shape out;
    for (auto a : p) out.push_back(ctx.shape(0)[size_t(a)]);
    ctx.set(0, ctx.dtype(0), out);
  }
  void grad(GradCtx& g) const override {
    auto p = attrs.resolved(int64_t(g.x(0)->shape.size()));
    std::vector<int64_t> inv(p.size());
    for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i] < 0 ? p[i] + int64_t(p.size()) : p[i])] = int64_t(i);
    g.set_dx(0, g.op("Transpose", {g.dy(0)}, {{"perm", inv}}));
  }
};

class ConcatOp : public OpWith<AxisAttrs> {
 public:
  explicit ConcatOp(const ir::Node& n) : OpWith({n.attr_int("axis")}) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    int64_t r = ctx.rank(0);
    int64_t a = ctx.axis(attrs.axis, r);
    Shape out = ctx.shape(0);
    out[size_t(a)] = Dim(0);
    bool have_values = r == 1;
    std::vector<Dim> values;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has(i)) continue;
      if (ctx.rank(i) != r)
        ctx.fail("input " + std::to_string(i) + " has rank " + std::to_string(ctx.rank(i)) + ", expected " +
                 std::to_string(r));
      for (int64_t d = 0; d < r; ++d) {
        if (d == a) continue;
        const Dim &x = out[size_t(d)], &y = ctx.shape(i)[size_t(d)];
        if (x.is_const() && y.is_const() && x != y)
          ctx.fail("input " + std::to_string(i) + " shape " + shape_str(ctx.shape(i)) + " does not match " +
                   shape_str(ctx.shape(0)) + " outside axis " + std::to_string(a));
        if (!x.is_const() && y.is_const()) out[size_t(d)] = y;
      }
      out[size_t(a)] = out[size_t(a)] + ctx.shape(i)[size_t(a)];
      auto* v = ctx.propagated(i);
      if (v)
        values.insert(values.end(), v->begin(), v->end());
      else
        have_values = false;
    }
    ctx.set(0, ctx.dtype(0), out, have_values ? std::optional(values) : std::nullopt);
  }
  void grad(GradCtx& g) const override {  // split the gradient at the inputs' sizes along the axis
    std::vector<ir::Value*> sizes;
    size_t n = g.node().inputs.size();
    int64_t r = int64_t(g.x(0)->shape.size()), a = attrs.axis < 0 ? attrs.axis + r : attrs.axis;
    for (size_t i = 0; i < n; ++i) sizes.push_back(g.gather(g.shape(g.x(i)), g.ints({a})));
    auto parts = g.ops("Split", {g.dy(0), g.concat(sizes, 0)}, n, {{"axis", a}});
    for (size_t i = 0; i < n; ++i) g.set_dx(i, parts[i]);
  }
};

class SplitOp : public OpWith<SplitAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  explicit SplitOp(const ir::Node& n) : OpWith({n.attr_int("axis", 0), n.attr_ints("split")}) {}
  bool recomputable() const override { return true; }
  std::vector<Dim> sizes(InferCtx& ctx) const {
    int64_t a = ctx.axis(attrs.axis, ctx.rank(0));
    Dim total = ctx.shape(0)[size_t(a)];
    size_t n = ctx.num_outputs();
    std::vector<Dim> s;
    if (!attrs.split.empty())
      s.assign(attrs.split.begin(), attrs.split.end());
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
    if (s.size() != n)
      ctx.fail("split has " + std::to_string(s.size()) + " sizes for " + std::to_string(n) + " outputs");
    Dim sum(0);
    for (auto& d : s) sum = sum + d;
    if (sum.is_const() && total.is_const() && sum != total)
      ctx.fail("split sizes sum to " + sum.str() + " but the axis has " + total.str());
    return s;
  }
  void infer(InferCtx& ctx) const override {
    auto s = sizes(ctx);
    int64_t a = ctx.axis(attrs.axis, ctx.rank(0));
    for (size_t i = 0; i < s.size(); ++i) {
      Shape sh = ctx.shape(0);
      sh[size_t(a)] = s[i];
      ctx.set(i, ctx.dtype(0), sh);
    }
  }
  void grad(GradCtx& g) const override {  // concatenate the outputs' gradients (zeros where none flowed)
    std::vector<ir::Value*> parts;
    for (size_t i = 0; i < g.node().outputs.size(); ++i) parts.push_back(g.dy(i) ? g.dy(i) : g.zeros_like(g.y(i)));
    g.set_dx(0, g.concat(parts, attrs.axis));
  }
};

class ExpandOp : public Op {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  explicit ExpandOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    auto* v = ctx.value(1);
    if (!v) ctx.unknown("the target shape");
    ctx.set(0, ctx.dtype(0), broadcast_shapes(ctx, ctx.shape(0), Shape(v->begin(), v->end())));
  }
  void grad(GradCtx& g) const override { g.set_dx(0, g.dy(0)); }  // the engine sums the broadcast dims
};

class TileOp : public Op {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  bool recomputable() const override { return true; }
  explicit TileOp(const ir::Node&) {}
  void infer(InferCtx& ctx) const override {
    auto* v = ctx.value(1);
    if (!v) ctx.unknown("repeats");
    if (int64_t(v->size()) != ctx.rank(0))
      ctx.fail("repeats has " + std::to_string(v->size()) + " entries for rank " + std::to_string(ctx.rank(0)));
    Shape out;
    for (size_t i = 0; i < v->size(); ++i) out.push_back(ctx.shape(0)[i] * (*v)[i]);
    ctx.set(0, ctx.dtype(0), out);
  }
  void grad(GradCtx& g) const override {  // every copy adds back to its source: tile the source positions
    ir::Value* x = g.x(0);
    ir::Value* positions =
        g.reshape(g.op("Range", {g.scalar(0, DType::kInt64), g.size(x), g.scalar(1, DType::kInt64)}), g.shape(x));
    g.set_dx(0, g.scatter_add_flat(x, g.op("Tile", {positions, g.x(1)}), g.dy(0)));
  }
};

PadAttrs pad_attrs(const ir::Node& n) {
  using M = PadAttrs::Mode;
  static const std::map<std::string, M> modes = {
      {"constant", M::kConstant}, {"reflect", M::kReflect}, {"edge", M::kEdge}, {"wrap", M::kWrap}};
  std::string mode = n.attr_string("mode", "constant");
  auto it = modes.find(mode);
  if (it == modes.end()) throw UnsupportedError(n.where() + ": mode '" + mode + "' is not supported");
  return {it->second, n.attr_ints("pads"), n.attr_float("value", 0), n.has_attr("pads")};
}

class PadOp : public OpWith<PadAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1, 2, 3}); }
  bool recomputable() const override { return true; }
  explicit PadOp(const ir::Node& n) : OpWith(pad_attrs(n)) {}
  void grad(GradCtx& g) const override {
    // dX: dY's window where X was written (pads, attribute or input, that add and do not crop), over every axis
    // or over the axes input's (a constant list: its length is how many begins the pads hold)
    const bool cropping = std::any_of(attrs.pads.begin(), attrs.pads.end(), [](int64_t p) { return p < 0; });
    if (attrs.mode != PadAttrs::Mode::kConstant || cropping) no_gradient(g);
    ir::Value *x = g.x(0), *axes = g.node().input(3);
    int64_t r = int64_t(x->shape.size());
    if (axes && !(axes->has_shape && axes->shape.size() == 1 && axes->shape[0].is_const())) no_gradient(g);
    int64_t n = axes ? axes->shape[0].value() : r;
    if (attrs.from_attr && int64_t(attrs.pads.size()) != 2 * r) no_gradient(g);
    ir::Value* begins = attrs.from_attr ? g.ints(std::vector<int64_t>(attrs.pads.begin(), attrs.pads.begin() + r))
                                        : g.op("Slice", {g.x(1), g.ints({0}), g.ints({n})});
    if (!axes) return g.set_dx(0, g.op("Slice", {g.dy(0), begins, g.add(begins, g.shape(x))}));
    ir::Value* sizes = g.op("Gather", {g.shape(x), axes});  // (Gather takes the axes' negative indices as they are)
    g.set_dx(0, g.op("Slice", {g.dy(0), begins, g.add(begins, sizes), axes}));
  }
  void infer(InferCtx& ctx) const override {
    auto p = attrs.resolved(ctx);
    int64_t r = ctx.rank(0);
    Shape out;
    for (int64_t i = 0; i < r; ++i) out.push_back(ctx.shape(0)[size_t(i)] + p[size_t(i)] + p[size_t(i + r)]);
    ctx.set(0, ctx.dtype(0), out);
  }
};

class TriluOp : public OpWith<TriluAttrs> {
 public:
  explicit TriluOp(const ir::Node& n) : OpWith({n.attr_int("upper", 1) != 0}) {}
  bool recomputable() const override { return true; }
  uint64_t host_inputs() const override { return input_bits({1}); }  // the kernel reads k
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) < 2) ctx.fail("input must have rank >= 2, got " + shape_str(ctx.shape(0)));
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
  }
  int inplace_input() const override { return 0; }
  void grad(GradCtx& g) const override {
    std::vector<ir::Value*> in = {g.dy(0)};
    if (g.x(1)) in.push_back(g.x(1));
    g.set_dx(0, g.op("Trilu", in, {{"upper", int64_t(attrs.upper)}}));
  }
};

const bool kRegistered = register_ops({
    {"", "Transpose", factory<TransposeOp>()},
    {"", "Concat", factory<ConcatOp>()},
    {"", "Split", factory<SplitOp>()},
    {"", "Expand", factory<ExpandOp>()},
    {"", "Tile", factory<TileOp>()},
    {"", "Pad", factory<PadOp>()},
    {"", "Trilu", factory<TriluOp>()},
});

}  // namespace

std::vector<int64_t> TransposeAttrs::resolved(int64_t rank) const {
  if (!perm.empty()) return perm;
  auto p = std::vector<int64_t>(size_t(rank));
  for (int64_t i = 0; i < rank; ++i) p[size_t(i)] = rank - 1 - i;
  return p;
}

std::vector<Dim> PadAttrs::resolved(InferCtx& ctx) const {
  int64_t r = ctx.rank(0);
  std::vector<Dim> p;
  if (from_attr)
    p.assign(pads.begin(), pads.end());
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
    if (p.size() != 2 * k)
      ctx.fail("pads has " + std::to_string(p.size()) + " entries for " + std::to_string(k) + " axes");
    for (size_t i = 0; i < k; ++i) {
      int64_t a = ctx.axis((*axes)[i], r);
      full[size_t(a)] = p[i];
      full[size_t(a + r)] = p[i + k];
    }
    p = full;
  }
  if (int64_t(p.size()) != 2 * r)
    ctx.fail("pads has " + std::to_string(p.size()) + " entries for rank " + std::to_string(r));
  return p;
}

}  // namespace onnxtrain::ops
