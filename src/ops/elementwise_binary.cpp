// Elementwise ops of two inputs with broadcasting: arithmetic, logic and
// comparisons. Integer arithmetic on small shape tensors is also propagated
// symbolically so that shape computations stay exact.
#include <cmath>

#include "ops/elementwise.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

// Symbolic elements of a binary op on two small integer tensors (or nullopt).
template <typename G>
std::optional<std::vector<Dim>> fold_values(InferCtx& ctx, G g) {
  const auto* a = ctx.propagated(0);
  const auto* b = ctx.propagated(1);
  if (!a || !b || ctx.rank(0) > 1 || ctx.rank(1) > 1) return std::nullopt;
  if (a->size() != b->size() && a->size() != 1 && b->size() != 1) return std::nullopt;
  std::vector<Dim> r(a->size() == 1 ? b->size() : a->size());  // one of 1 element broadcasts, even to 0
  for (size_t i = 0; i < r.size(); ++i) {
    auto v = g((*a)[a->size() == 1 ? 0 : i], (*b)[b->size() == 1 ? 0 : i]);
    if (!v) return std::nullopt;
    r[i] = *v;
  }
  return r;
}

template <typename F>
class BinaryOp : public OpWith<BinaryAttrs> {
 public:
  explicit BinaryOp(const ir::Node& n) : OpWith({n.attr_int("fmod", 0) != 0}) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    if (ctx.dtype(0) != ctx.dtype(1))
      ctx.fail("input dtypes differ: " + dtype_name(ctx.dtype(0)) + " and " + dtype_name(ctx.dtype(1)));
    infer_broadcast(ctx, ctx.dtype(0));
    if (ctx.dtype(0) == DType::kInt64 || ctx.dtype(0) == DType::kInt32)
      ctx.outputs()[0].value = fold_values(ctx, [&](const Dim& a, const Dim& b) { return fold(a, b); });
  }
  std::optional<Dim> fold(const Dim& a, const Dim& b) const {
    if constexpr (requires { F::fold(a, b, attrs); })
      return F::fold(a, b, attrs);
    else
      return F::fold(a, b);
  }
  int inplace_input() const override { return 0; }
  void grad(GradCtx& g) const override { F::grad(g); }
};

using ir::Value;

struct NoFold {
  static std::optional<Dim> fold(const Dim&, const Dim&) { return std::nullopt; }
};
// Ops whose outputs are bool: no gradient ever flows into them.
struct BoolOut : NoFold {
  static void grad(GradCtx&) {}
};

struct AddFn {
  static std::optional<Dim> fold(const Dim& a, const Dim& b) { return a + b; }
  static void grad(GradCtx& g) {
    g.set_dx(0, g.dy(0));
    g.set_dx(1, g.dy(0));
  }
};
struct SubFn {
  static std::optional<Dim> fold(const Dim& a, const Dim& b) { return a - b; }
  static void grad(GradCtx& g) {
    g.set_dx(0, g.dy(0));
    if (g.needs(1)) g.set_dx(1, g.neg(g.dy(0)));
  }
};
struct MulFn {
  static std::optional<Dim> fold(const Dim& a, const Dim& b) { return a * b; }
  static void grad(GradCtx& g) {
    if (g.needs(0)) g.set_dx(0, g.mul(g.dy(0), g.x(1)));
    if (g.needs(1)) g.set_dx(1, g.mul(g.dy(0), g.x(0)));
  }
};
struct DivFn {
  // By a positive constant, or a size by a size (both provably >= 0, so truncation and flooring agree): exact
  // where the divisor divides every term (TorchDynamo's (t**2) // t), else an opaque quotient.
  static std::optional<Dim> fold(const Dim& a, const Dim& b) {
    if (b.is_const() && b.value() > 0 && (!a.is_const() || a.value() >= 0)) return Dim::floor_div(a, b);
    if (!b.is_const() && a.provably_non_negative() && b.provably_non_negative()) return Dim::floor_div(a, b);
    return std::nullopt;
  }
  static void grad(GradCtx& g) {  // d(a/b) = da/b - db a/b^2
    Value* da = g.div(g.dy(0), g.x(1));
    g.set_dx(0, da);
    if (g.needs(1)) g.set_dx(1, g.neg(g.mul(da, g.y(0))));
  }
};
struct ModFn {
  // a - b floor(a / b), the quotient an opaque atom, so that what is cut at the remainder adds up again
  // (torch.roll's two slices and their concatenation): of sizes (both provably >= 0, so truncation and flooring
  // agree), or by a positive constant without fmod, whatever a's sign (Python's %: SwinV2's padding to a multiple
  // of its window, (w - W % w) % w).
  static std::optional<Dim> fold(const Dim& a, const Dim& b, const BinaryAttrs& attrs) {
    bool sizes = a.provably_non_negative() && b.provably_non_negative();
    bool floored = !attrs.fmod && b.is_const() && b.value() > 0;
    if (!sizes && !floored) return std::nullopt;
    return a - b * Dim::floor_div(a, b);
  }
  // r = a - b q with q = trunc(a / b) (fmod) or floor(a / b): da = dy, db = -dy q (q recovered from r exactly
  // enough to round: (a - r) / b is within rounding of an integer).
  static void grad(GradCtx& g) {
    if (g.needs(0)) g.set_dx(0, g.dy(0));
    if (g.needs(1)) g.set_dx(1, g.neg(g.mul(g.dy(0), g.op("Round", {g.div(g.sub(g.x(0), g.y(0)), g.x(1))}))));
  }
};
struct PReluFn : NoFold {
  static void grad(GradCtx& g) {
    Value *x = g.x(0), *dy = g.dy(0);
    Value* pos = g.greater(x, g.like(0, x));
    if (g.needs(0)) g.set_dx(0, g.where(pos, dy, g.mul(dy, g.x(1))));
    if (g.needs(1)) g.set_dx(1, g.where(pos, g.like(0, dy), g.mul(dy, x)));
  }
};
using AddOp = BinaryOp<AddFn>;
using SubOp = BinaryOp<SubFn>;
using MulOp = BinaryOp<MulFn>;
using DivOp = BinaryOp<DivFn>;
using ModOp = BinaryOp<ModFn>;
using PReluOp = BinaryOp<PReluFn>;
using AndOp = BinaryOp<BoolOut>;
using OrOp = BinaryOp<BoolOut>;
using XorOp = BinaryOp<BoolOut>;

// Comparisons: any input dtype, bool output.
template <typename F>
class CompareOp : public Op {
 public:
  explicit CompareOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  DType output_dtype(size_t, const std::vector<DType>&) const override { return DType::kBool; }
  void infer(InferCtx& ctx) const override {
    if (ctx.dtype(0) != ctx.dtype(1))
      ctx.fail("input dtypes differ: " + dtype_name(ctx.dtype(0)) + " and " + dtype_name(ctx.dtype(1)));
    infer_broadcast(ctx, DType::kBool);
    // Shape arithmetic compares sizes (Equal(shape, -1) before an Expand): fold what is decidable.
    ctx.outputs()[0].value = fold_values(ctx, [](const Dim& a, const Dim& b) -> std::optional<Dim> {
      if (a.is_const() && b.is_const()) return Dim(int64_t(F()(a.value(), b.value())));
      if (std::is_same_v<F, std::equal_to<>>) {
        if (a == b) return Dim(1);
        // A size is never negative: it differs from any negative constant.
        if ((a.is_const() && a.value() < 0) || (b.is_const() && b.value() < 0)) return Dim(0);
      }
      return std::nullopt;
    });
  }
};
using EqualOp = CompareOp<std::equal_to<>>;
using LessOp = CompareOp<std::less<>>;
using LessOrEqualOp = CompareOp<std::less_equal<>>;
using GreaterOp = CompareOp<std::greater<>>;
using GreaterOrEqualOp = CompareOp<std::greater_equal<>>;

// Pow: the exponent may have another dtype than the base; the result has the base's.
class PowOp : public Op {
 public:
  explicit PowOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    infer_broadcast(ctx, ctx.dtype(0));
    if (ctx.dtype(0) != DType::kInt64 && ctx.dtype(0) != DType::kInt32) return;
    // An integer to a small constant power, as a product (shape arithmetic: TorchDynamo's t**2)
    ctx.outputs()[0].value = fold_values(ctx, [](const Dim& a, const Dim& b) -> std::optional<Dim> {
      if (!b.is_const() || b.value() < 0 || b.value() > 8) return std::nullopt;
      Dim r(1);
      for (int64_t i = 0; i < b.value(); ++i) r = r * a;
      return r;
    });
  }
  void grad(GradCtx& g) const override {  // d(a^b) = b a^(b-1) da + a^b log(a) db
    Value *a = g.x(0), *b = g.x(1), *dy = g.dy(0);
    if (g.needs(0)) {
      Value* bf = b->dtype == a->dtype ? b : g.cast(b, a->dtype);
      g.set_dx(0, g.mul(dy, g.mul(bf, g.op("Pow", {a, g.sub(bf, g.like(1, bf))}))));
    }
    if (g.needs(1)) g.set_dx(1, g.mul(dy, g.mul(g.y(0), g.log(a))));
  }
};

// Max, Min, Sum, Mean: any number of inputs, folded pairwise into the output.
class VariadicOp : public Op {
 public:
  explicit VariadicOp(const ir::Node& n) : kind_(n.op_type) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override { infer_broadcast(ctx, ctx.dtype(0)); }
  void grad(GradCtx& g) const override {
    Value* dy = g.dy(0);
    size_t n = g.node().inputs.size();
    for (size_t i = 0; i < n; ++i) {
      if (!g.needs(i)) continue;
      if (kind_ == "Sum")
        g.set_dx(i, dy);
      else if (kind_ == "Mean")
        g.set_dx(i, g.div(dy, g.like(double(n), dy)));
      else
        g.set_dx(i, g.where_or_zero(g.equal(g.x(i), g.y(0)), dy));  // Max/Min: where x_i is the result
    }
  }

 private:
  std::string kind_;
};

class WhereOp : public Op {
 public:
  explicit WhereOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  DType output_dtype(size_t, const std::vector<DType>& in) const override { return in.at(1); }
  void grad(GradCtx& g) const override {
    Value *c = g.x(0), *dy = g.dy(0);
    if (g.needs(1)) g.set_dx(1, g.where_or_zero(c, dy));
    if (g.needs(2)) g.set_dx(2, g.where(c, g.like(0, dy), dy));
  }
  void infer(InferCtx& ctx) const override {
    Shape s = broadcast_shapes(ctx, broadcast_shapes(ctx, ctx.shape(0), ctx.shape(1)), ctx.shape(2));
    std::optional<std::vector<Dim>> value;
    const auto *c = ctx.propagated(0), *x = ctx.propagated(1), *y = ctx.propagated(2);
    if (c && x && y && s.size() <= 1 && (s.empty() || s[0].is_const())) {  // selecting among known sizes
      size_t n = s.empty() ? 1 : size_t(s[0].value());
      bool fit = true;  // a value of one element broadcasts; any other has the output's size
      for (auto* v : {c, x, y}) fit = fit && (v->size() == 1 || v->size() == n);
      if (fit) value.emplace();
      for (size_t i = 0; i < n && value; ++i) {
        const Dim& ci = (*c)[c->size() == 1 ? 0 : i];
        if (!ci.is_const())
          value.reset();
        else
          value->push_back(ci.value() ? (*x)[x->size() == 1 ? 0 : i] : (*y)[y->size() == 1 ? 0 : i]);
      }
    }
    ctx.set(0, ctx.dtype(1), s, value);
  }
};

// Clip: bounds from attributes (opset < 11) or from optional scalar inputs.
class ClipOp : public OpWith<ClipAttrs> {
 public:
  explicit ClipOp(const ir::Node& n) : OpWith({n.attr_float("min", -INFINITY), n.attr_float("max", INFINITY)}) {}
  bool recomputable() const override { return true; }
  void grad(GradCtx& g) const override {  // passes where min <= x <= max
    Value *x = g.x(0), *dy = g.dy(0);
    Value* lo = g.x(1) ? g.x(1) : (std::isinf(attrs.min) ? nullptr : g.like(attrs.min, x));
    Value* hi = g.x(2) ? g.x(2) : (std::isinf(attrs.max) ? nullptr : g.like(attrs.max, x));
    Value* keep = nullptr;
    if (lo) keep = g.op("GreaterOrEqual", {x, lo});
    if (hi) {
      Value* k = g.op("LessOrEqual", {x, hi});
      keep = keep ? g.logical_and(keep, k) : k;
    }
    g.set_dx(0, keep ? g.where_or_zero(keep, dy) : dy);
  }
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
  int inplace_input() const override { return 0; }
};

const bool kRegistered = register_ops({
    {"", "Add", factory<AddOp>()},         {"", "Sub", factory<SubOp>()},
    {"", "Mul", factory<MulOp>()},         {"", "Div", factory<DivOp>()},
    {"", "Mod", factory<ModOp>()},         {"", "PRelu", factory<PReluOp>()},
    {"", "And", factory<AndOp>()},         {"", "Or", factory<OrOp>()},
    {"", "Xor", factory<XorOp>()},         {"", "Equal", factory<EqualOp>()},
    {"", "Less", factory<LessOp>()},       {"", "LessOrEqual", factory<LessOrEqualOp>()},
    {"", "Greater", factory<GreaterOp>()}, {"", "GreaterOrEqual", factory<GreaterOrEqualOp>()},
    {"", "Pow", factory<PowOp>()},         {"", "Max", factory<VariadicOp>()},
    {"", "Min", factory<VariadicOp>()},    {"", "Sum", factory<VariadicOp>()},
    {"", "Mean", factory<VariadicOp>()},   {"", "Where", factory<WhereOp>()},
    {"", "Clip", factory<ClipOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
