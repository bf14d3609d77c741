// Elementwise ops of two inputs with broadcasting: arithmetic, logic and
// comparisons. Integer arithmetic on small shape tensors is also propagated
// symbolically so that shape computations stay exact.
#include <cmath>
#include <cstring>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

using kernels::dispatch;

// Symbolic elements of a binary op on two small integer tensors (or nullopt).
template <typename G>
std::optional<std::vector<Dim>> fold_values(InferCtx& ctx, G g) {
  const auto* a = ctx.value(0);
  const auto* b = ctx.value(1);
  if (!a || !b || ctx.rank(0) > 1 || ctx.rank(1) > 1) return std::nullopt;
  if (a->size() != b->size() && a->size() != 1 && b->size() != 1) return std::nullopt;
  std::vector<Dim> r(std::max(a->size(), b->size()));
  for (size_t i = 0; i < r.size(); ++i) {
    auto v = g((*a)[a->size() == 1 ? 0 : i], (*b)[b->size() == 1 ? 0 : i]);
    if (!v) return std::nullopt;
    r[i] = *v;
  }
  return r;
}

template <typename F, int Types>
class BinaryOp : public Op {
 public:
  explicit BinaryOp(const ir::Node& n) : f_(n) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    if (ctx.dtype(0) != ctx.dtype(1))
      ctx.fail("input dtypes differ: " + dtype_name(ctx.dtype(0)) + " and " + dtype_name(ctx.dtype(1)));
    infer_broadcast(ctx, ctx.dtype(0));
    if (ctx.dtype(0) == DType::kInt64 || ctx.dtype(0) == DType::kInt32)
      ctx.outputs()[0].value = fold_values(ctx, [&](const Dim& a, const Dim& b) { return F::fold(a, b); });
  }
  void compute(ComputeCtx& c) const override {
    dispatch<Types>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::broadcast_apply<2, T>(c.out(0).data<T>(), c.out(0).dims(), {c.in(0).data<T>(), c.in(1).data<T>()},
                                  {&c.in(0).dims(), &c.in(1).dims()}, [this](T a, T b) { return T(f_(a, b)); });
    });
  }
  int inplace_input() const override { return 0; }
  void grad(GradCtx& g) const override { f_.grad(g); }

 private:
  F f_;
};

using ir::Value;

struct NoFold {
  static std::optional<Dim> fold(const Dim&, const Dim&) { return std::nullopt; }
};
// Ops whose outputs are bool: no gradient ever flows into them.
struct BoolOut : NoFold {
  void grad(GradCtx&) const {}
};

struct AddFn {
  explicit AddFn(const ir::Node&) {}
  template <typename T>
  T operator()(T a, T b) const { return a + b; }
  static std::optional<Dim> fold(const Dim& a, const Dim& b) { return a + b; }
  void grad(GradCtx& g) const {
    g.set_dx(0, g.dy(0));
    g.set_dx(1, g.dy(0));
  }
};
struct SubFn {
  explicit SubFn(const ir::Node&) {}
  template <typename T>
  T operator()(T a, T b) const { return a - b; }
  static std::optional<Dim> fold(const Dim& a, const Dim& b) { return a - b; }
  void grad(GradCtx& g) const {
    g.set_dx(0, g.dy(0));
    if (g.needs(1)) g.set_dx(1, g.neg(g.dy(0)));
  }
};
struct MulFn {
  explicit MulFn(const ir::Node&) {}
  template <typename T>
  T operator()(T a, T b) const { return a * b; }
  static std::optional<Dim> fold(const Dim& a, const Dim& b) { return a * b; }
  void grad(GradCtx& g) const {
    if (g.needs(0)) g.set_dx(0, g.mul(g.dy(0), g.x(1)));
    if (g.needs(1)) g.set_dx(1, g.mul(g.dy(0), g.x(0)));
  }
};
struct DivFn {
  explicit DivFn(const ir::Node&) {}
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : T(a / b);  // no trap on a zero divisor
    else return a / b;
  }
  static std::optional<Dim> fold(const Dim& a, const Dim& b) {
    if (b.is_const() && b.value() > 0 && (!a.is_const() || a.value() >= 0)) return Dim::floor_div(a, b);
    return std::nullopt;
  }
  void grad(GradCtx& g) const {  // d(a/b) = da/b - db a/b^2
    Value* da = g.div(g.dy(0), g.x(1));
    g.set_dx(0, da);
    if (g.needs(1)) g.set_dx(1, g.neg(g.mul(da, g.y(0))));
  }
};
struct ModFn : NoFold {
  explicit ModFn(const ir::Node& n) : fmod(n.attr_int("fmod", 0)) {}
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    } else {
      if (b == 0) return T(0);
      T r = T(a % b);
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
      return r;
    }
  }
  // r = a - b q with q = trunc(a / b) (fmod) or floor(a / b): da = dy, db = -dy q (q recovered from r exactly
  // enough to round: (a - r) / b is within rounding of an integer).
  void grad(GradCtx& g) const {
    if (g.needs(0)) g.set_dx(0, g.dy(0));
    if (g.needs(1)) g.set_dx(1, g.neg(g.mul(g.dy(0), g.op("Round", {g.div(g.sub(g.x(0), g.y(0)), g.x(1))}))));
  }
  bool fmod;
};
struct PReluFn : NoFold {
  explicit PReluFn(const ir::Node&) {}
  template <typename T>
  T operator()(T x, T slope) const { return x < T(0) ? T(slope * x) : x; }
  void grad(GradCtx& g) const {
    Value *x = g.x(0), *dy = g.dy(0);
    Value* pos = g.op("Greater", {x, g.like(0, x)});
    if (g.needs(0)) g.set_dx(0, g.op("Where", {pos, dy, g.mul(dy, g.x(1))}));
    if (g.needs(1)) g.set_dx(1, g.op("Where", {pos, g.like(0, dy), g.mul(dy, x)}));
  }
};
struct AndFn : BoolOut {
  explicit AndFn(const ir::Node&) {}
  bool operator()(bool a, bool b) const { return a && b; }
};
struct OrFn : BoolOut {
  explicit OrFn(const ir::Node&) {}
  bool operator()(bool a, bool b) const { return a || b; }
};
struct XorFn : BoolOut {
  explicit XorFn(const ir::Node&) {}
  bool operator()(bool a, bool b) const { return a != b; }
};
constexpr int kN = kernels::kNumeric;
using AddOp = BinaryOp<AddFn, kN>;
using SubOp = BinaryOp<SubFn, kN>;
using MulOp = BinaryOp<MulFn, kN>;
using DivOp = BinaryOp<DivFn, kN>;
using ModOp = BinaryOp<ModFn, kN>;
using PReluOp = BinaryOp<PReluFn, kN>;
using AndOp = BinaryOp<AndFn, kernels::kBool>;
using OrOp = BinaryOp<OrFn, kernels::kBool>;
using XorOp = BinaryOp<XorFn, kernels::kBool>;
OT_REGISTER_OP("Add", AddOp);
OT_REGISTER_OP("Sub", SubOp);
OT_REGISTER_OP("Mul", MulOp);
OT_REGISTER_OP("Div", DivOp);
OT_REGISTER_OP("Mod", ModOp);
OT_REGISTER_OP("PRelu", PReluOp);
OT_REGISTER_OP("And", AndOp);
OT_REGISTER_OP("Or", OrOp);
OT_REGISTER_OP("Xor", XorOp);

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
  void compute(ComputeCtx& c) const override {
    dispatch<kernels::kAll>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::broadcast_apply<2, T>(c.out(0).data<bool>(), c.out(0).dims(), {c.in(0).data<T>(), c.in(1).data<T>()},
                                  {&c.in(0).dims(), &c.in(1).dims()}, [](T a, T b) { return F()(a, b); });
    });
  }
};
using EqualOp = CompareOp<std::equal_to<>>;
using LessOp = CompareOp<std::less<>>;
using LessOrEqualOp = CompareOp<std::less_equal<>>;
using GreaterOp = CompareOp<std::greater<>>;
using GreaterOrEqualOp = CompareOp<std::greater_equal<>>;
OT_REGISTER_OP("Equal", EqualOp);
OT_REGISTER_OP("Less", LessOp);
OT_REGISTER_OP("LessOrEqual", LessOrEqualOp);
OT_REGISTER_OP("Greater", GreaterOp);
OT_REGISTER_OP("GreaterOrEqual", GreaterOrEqualOp);

// Pow: the exponent may have another dtype than the base; the result has the base's.
class PowOp : public Op {
 public:
  explicit PowOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override { infer_broadcast(ctx, ctx.dtype(0)); }
  void grad(GradCtx& g) const override {  // d(a^b) = b a^(b-1) da + a^b log(a) db
    Value *a = g.x(0), *b = g.x(1), *dy = g.dy(0);
    if (g.needs(0)) {
      Value* bf = b->dtype == a->dtype ? b : g.op("Cast", {b}, {{"to", int64_t(a->dtype)}});
      g.set_dx(0, g.mul(dy, g.mul(bf, g.op("Pow", {a, g.sub(bf, g.like(1, bf))}))));
    }
    if (g.needs(1)) g.set_dx(1, g.mul(dy, g.mul(g.y(0), g.op("Log", {a}))));
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &x = c.in(0), &y = c.in(1);
    dispatch<kN>(x.dtype(), c.node.where(), [&](auto tx) {
      using T = typename decltype(tx)::type;
      if (y.dtype() == x.dtype()) {
        kernels::broadcast_apply<2, T>(c.out(0).data<T>(), c.out(0).dims(), {x.data<T>(), y.data<T>()},
                                    {&x.dims(), &y.dims()}, [](T a, T b) {
                                      if constexpr (std::is_floating_point_v<T>) {
                                        if (b == T(2)) return T(a * a);
                                        return T(std::pow(a, b));
                                      } else {
                                        return T(std::pow(double(a), double(b)));
                                      }
                                    });
        return;
      }
      dispatch<kN>(y.dtype(), c.node.where(), [&](auto ty) {
        using U = typename decltype(ty)::type;
        const T* a = x.data<T>();
        const U* b = y.data<U>();
        T* o = c.out(0).data<T>();
        kernels::broadcast_rows<2>(c.out(0).dims(), {&x.dims(), &y.dims()}, [&](int64_t oo, auto off, auto st, int64_t len) {
          for (int64_t j = 0; j < len; ++j) o[oo + j] = T(std::pow(double(a[off[0] + j * st[0]]), double(b[off[1] + j * st[1]])));
        });
      });
    });
  }
};
OT_REGISTER_OP("Pow", PowOp);

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
      if (kind_ == "Sum") g.set_dx(i, dy);
      else if (kind_ == "Mean") g.set_dx(i, g.div(dy, g.like(double(n), dy)));
      else g.set_dx(i, g.where_or_zero(g.op("Equal", {g.x(i), g.y(0)}), dy));  // Max/Min: where x_i is the result
    }
  }
  void compute(ComputeCtx& c) const override {
    Tensor& out = c.out(0);
    dispatch<kN>(out.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = out.data<T>();
      const auto& od = out.dims();
      // Output starts as input 0 broadcast; each further input is folded in place.
      kernels::broadcast_apply<1, T>(o, od, {c.in(0).data<T>()}, {&c.in(0).dims()}, [](T a) { return a; });
      for (size_t k = 1; k < c.inputs.size(); ++k) {
        const T* b = c.in(k).data<T>();
        auto run = [&](auto f) {
          kernels::broadcast_apply<2, T>(o, od, {static_cast<const T*>(o), b}, {&od, &c.in(k).dims()}, f);
        };
        if (kind_ == "Max") run([](T a, T b) { return (std::isnan(double(a)) || a >= b) ? a : b; });
        else if (kind_ == "Min") run([](T a, T b) { return (std::isnan(double(a)) || a <= b) ? a : b; });
        else run([](T a, T b) { return T(a + b); });
      }
      if (kind_ == "Mean") {
        T n = T(c.inputs.size());
        for (int64_t i = 0; i < out.numel(); ++i) o[i] = T(o[i] / n);
      }
    });
  }

 private:
  std::string kind_;
};
OT_REGISTER_OP("Max", VariadicOp);
OT_REGISTER_OP("Min", VariadicOp);
OT_REGISTER_OP("Sum", VariadicOp);
OT_REGISTER_OP("Mean", VariadicOp);

class WhereOp : public Op {
 public:
  explicit WhereOp(const ir::Node&) {}
  bool recomputable() const override { return true; }
  DType output_dtype(size_t, const std::vector<DType>& in) const override { return in.at(1); }
  void grad(GradCtx& g) const override {
    Value *c = g.x(0), *dy = g.dy(0);
    if (g.needs(1)) g.set_dx(1, g.where_or_zero(c, dy));
    if (g.needs(2)) g.set_dx(2, g.op("Where", {c, g.like(0, dy), dy}));
  }
  void infer(InferCtx& ctx) const override {
    Shape s = broadcast_shapes(ctx, broadcast_shapes(ctx, ctx.shape(0), ctx.shape(1)), ctx.shape(2));
    std::optional<std::vector<Dim>> value;
    const auto *c = ctx.value(0), *x = ctx.value(1), *y = ctx.value(2);
    if (c && x && y && s.size() <= 1) {  // selecting among known sizes
      size_t n = std::max({c->size(), x->size(), y->size()});
      value.emplace();
      for (size_t i = 0; i < n && value; ++i) {
        const Dim& ci = (*c)[c->size() == 1 ? 0 : i];
        if (!ci.is_const()) value.reset();
        else value->push_back(ci.value() ? (*x)[x->size() == 1 ? 0 : i] : (*y)[y->size() == 1 ? 0 : i]);
      }
    }
    ctx.set(0, ctx.dtype(1), s, value);
  }
  void compute(ComputeCtx& c) const override {
    const bool* cond = c.in(0).data<bool>();
    kernels::dispatch_bytes(c.in(1).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = c.in(1).data<T>();
      const T* y = c.in(2).data<T>();
      T* o = c.out(0).data<T>();
      kernels::broadcast_rows<3>(c.out(0).dims(), {&c.in(0).dims(), &c.in(1).dims(), &c.in(2).dims()},
                                 [&](int64_t oo, auto off, auto st, int64_t len) {
                                   const bool* cr = cond + off[0];
                                   const T* xr = x + off[1];
                                   const T* yr = y + off[2];
                                   for (int64_t j = 0; j < len; ++j) o[oo + j] = cr[j * st[0]] ? xr[j * st[1]] : yr[j * st[2]];
                                 });
    });
  }
};
OT_REGISTER_OP("Where", WhereOp);

// Clip: bounds from attributes (opset < 11) or from optional scalar inputs.
class ClipOp : public Op {
 public:
  explicit ClipOp(const ir::Node& n)
      : attr_min_(n.attr_float("min", -INFINITY)), attr_max_(n.attr_float("max", INFINITY)) {}
  bool recomputable() const override { return true; }
  void grad(GradCtx& g) const override {  // passes where min <= x <= max
    Value *x = g.x(0), *dy = g.dy(0);
    Value* lo = g.x(1) ? g.x(1) : (std::isinf(attr_min_) ? nullptr : g.like(attr_min_, x));
    Value* hi = g.x(2) ? g.x(2) : (std::isinf(attr_max_) ? nullptr : g.like(attr_max_, x));
    Value* keep = nullptr;
    if (lo) keep = g.op("GreaterOrEqual", {x, lo});
    if (hi) {
      Value* k = g.op("LessOrEqual", {x, hi});
      keep = keep ? g.op("And", {keep, k}) : k;
    }
    g.set_dx(0, keep ? g.where_or_zero(keep, dy) : dy);
  }
  void infer(InferCtx& ctx) const override { ctx.set(0, ctx.dtype(0), ctx.shape(0)); }
  void compute(ComputeCtx& c) const override {
    dispatch<kN>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
      if constexpr (std::is_floating_point_v<T>) {
        lo = T(attr_min_);
        hi = T(attr_max_);
      }
      if (c.has(1) && c.in(1).numel()) lo = c.in(1).data<T>()[0];
      if (c.has(2) && c.in(2).numel()) hi = c.in(2).data<T>()[0];
      const T* x = c.in(0).data<T>();
      T* y = c.out(0).data<T>();
      for (int64_t i = 0, n = c.in(0).numel(); i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);  // min > max gives max, as ONNX says
    });
  }
  int inplace_input() const override { return 0; }

 private:
  float attr_min_, attr_max_;
};
OT_REGISTER_OP("Clip", ClipOp);

}  // namespace
}  // namespace onnxtrain::ops
