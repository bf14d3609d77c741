// Reductions over a set of axes (ReduceSum, ReduceMean, ...) and over one axis
// (ArgMax, ArgMin). Axes come from an attribute or, in newer opsets, input 1.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/vector_math.h"
#include "ops/axis_util.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

Reduce reduce_kind(const std::string& op) {
  if (op == "ReduceSum") return Reduce::kSum;
  if (op == "ReduceMean") return Reduce::kMean;
  if (op == "ReduceMax") return Reduce::kMax;
  if (op == "ReduceMin") return Reduce::kMin;
  if (op == "ReduceProd") return Reduce::kProd;
  if (op == "ReduceL1") return Reduce::kL1;
  if (op == "ReduceL2") return Reduce::kL2;
  if (op == "ReduceSumSquare") return Reduce::kSumSquare;
  if (op == "ReduceLogSum") return Reduce::kLogSum;
  return Reduce::kLogSumExp;
}

class ReduceOp : public Op {
 public:
  explicit ReduceOp(const ir::Node& n)
      : kind_(reduce_kind(n.op_type)), keepdims_(n.attr_int("keepdims", 1)),
        noop_empty_(n.attr_int("noop_with_empty_axes", 0)), axes_attr_(n.attr_ints("axes")), has_attr_(n.has_attr("axes")) {}
  bool recomputable() const override { return true; }

  // The reduced axes as a mask over the input's dims.
  std::vector<bool> mask(InferCtx& ctx) const {
    int64_t r = ctx.rank(0);
    std::vector<int64_t> axes = axes_attr_;
    if (!has_attr_ && ctx.has(1)) {
      auto v = ctx.int_values(1);
      if (!v) ctx.unknown("axes");
      axes = *v;
    }
    std::vector<bool> m(size_t(r), axes.empty() && !noop_empty_);
    for (int64_t a : axes) m[size_t(ctx.axis(a, r))] = true;
    return m;
  }
  void grad(GradCtx& g) const override;
  void infer(InferCtx& ctx) const override {
    auto m = mask(ctx);
    Shape out;
    for (size_t i = 0; i < m.size(); ++i) {
      if (!m[i]) out.push_back(ctx.shape(0)[i]);
      else if (keepdims_) out.push_back(Dim(1));
    }
    ctx.set(0, ctx.dtype(0), out);
  }
  void compute(ComputeCtx& c) const override {
    auto m = mask(*c.shapes);
    const Tensor& x = c.in(0);
    // Move reduced axes last, then reduce rows of length `len`.
    std::vector<int64_t> perm, dims;
    for (size_t i = 0; i < m.size(); ++i)
      if (!m[i]) perm.push_back(int64_t(i));
    for (size_t i = 0; i < m.size(); ++i)
      if (m[i]) perm.push_back(int64_t(i));
    int64_t len = 1;
    for (size_t i = 0; i < m.size(); ++i)
      if (m[i]) len *= x.dims()[i];
    int64_t rows = c.out(0).numel();
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == int64_t(i);
    // Summing leading axes (bias gradients: (B*T, C) -> C) runs down the columns, with no transposed copy.
    size_t lead = 0;
    while (lead < m.size() && m[lead]) ++lead;
    bool leading = lead > 0 && std::all_of(m.begin() + long(lead), m.end(), [](bool b) { return !b; });
    if (leading && kind_ == Reduce::kSum && dtype_is_float(x.dtype()))
      return kernels::dispatch<kernels::kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = x.data<T>();
        T* out = c.out(0).data<T>();
        // Blocks of 64 columns (whole cache lines), each summed down every row into double accumulators.
        constexpr int64_t kCols = 64;
        parallel_for((rows + kCols - 1) / kCols, len * kCols, [&](int64_t b, int64_t e) {
          for (int64_t block = b; block < e; ++block) {
            int64_t j0 = block * kCols, width = std::min(kCols, rows - j0);
            double acc[kCols] = {};
            for (int64_t r = 0; r < len; ++r) {
              const T* row = src + r * rows + j0;
              for (int64_t j = 0; j < width; ++j) acc[j] += double(row[j]);
            }
            for (int64_t j = 0; j < width; ++j) out[j0 + j] = T(acc[j]);
          }
        });
      });
    kernels::dispatch<kernels::kNumeric>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = x.data<T>();
      std::vector<T> moved;
      if (!identity) {
        auto st = kernels::contiguous_strides(x.dims());
        std::vector<int64_t> pd, ps;
        for (auto p : perm) {
          pd.push_back(x.dims()[size_t(p)]);
          ps.push_back(st[size_t(p)]);
        }
        moved.resize(size_t(x.numel()));
        kernels::strided_copy(moved.data(), src, pd, ps);
        src = moved.data();
      }
      T* out = c.out(0).data<T>();
      parallel_for(rows, len, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) out[r] = reduce_row(src + r * len, len);
      });
    });
  }

 private:
  template <typename T>
  T reduce_row(const T* x, int64_t n) const {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
    switch (kind_) {
      case Reduce::kMax: {
        T m = n ? x[0] : std::numeric_limits<T>::lowest();
        if constexpr (std::is_floating_point_v<T>)
          if (!n) m = -std::numeric_limits<T>::infinity();
        for (int64_t i = 1; i < n; ++i) m = std::isnan(double(x[i])) || x[i] > m ? x[i] : m;
        return m;
      }
      case Reduce::kMin: {
        T m = n ? x[0] : std::numeric_limits<T>::max();
        if constexpr (std::is_floating_point_v<T>)
          if (!n) m = std::numeric_limits<T>::infinity();
        for (int64_t i = 1; i < n; ++i) m = std::isnan(double(x[i])) || x[i] < m ? x[i] : m;
        return m;
      }
      case Reduce::kProd: {
        Acc p = 1;
        for (int64_t i = 0; i < n; ++i) p *= Acc(x[i]);
        return T(p);
      }
      case Reduce::kLogSumExp: {
        double m = -INFINITY;
        for (int64_t i = 0; i < n; ++i) m = std::max(m, double(x[i]));
        if (std::isinf(m)) return T(m);
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
        return T(m + std::log(s));
      }
      default: break;
    }
    if constexpr (std::is_same_v<T, float>) {
      if (kind_ == Reduce::kSum || kind_ == Reduce::kMean) {  // the common case, vectorised
        double sum = kernels::sum_f32(x, n);
        return kind_ == Reduce::kSum ? T(sum) : n ? T(sum / double(n)) : T(NAN);
      }
    }
    Acc s = 0;
    for (int64_t i = 0; i < n; ++i) {
      Acc v = Acc(x[i]);
      if (kind_ == Reduce::kL1) v = v < 0 ? -v : v;
      if (kind_ == Reduce::kL2 || kind_ == Reduce::kSumSquare) v = v * v;
      s += v;
    }
    if (kind_ == Reduce::kMean) return n ? T(double(s) / double(n)) : T(NAN);
    if (kind_ == Reduce::kL2) return T(std::sqrt(double(s)));
    if (kind_ == Reduce::kLogSum) return T(std::log(double(s)));
    return T(s);
  }

  Reduce kind_;
  bool keepdims_, noop_empty_;
  std::vector<int64_t> axes_attr_;
  bool has_attr_;
};
using ir::Value;

void ReduceOp::grad(GradCtx& g) const {
  Value *x = g.x(0), *y = g.y(0), *dy = g.dy(0);
  int64_t r = int64_t(x->shape.size());
  std::vector<int64_t> axes = axes_attr_;
  if (!has_attr_ && g.x(1)) {
    const auto& v = g.x(1)->sym_value;
    if (!v) no_gradient(g);
    for (auto& d : *v) {
      if (!d.is_const()) no_gradient(g);
      axes.push_back(d.value() < 0 ? d.value() + r : d.value());
    }
  }
  if (axes.empty() && !noop_empty_)
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (auto& a : axes) a = a < 0 ? a + r : a;
  // dy and y with the reduced dims kept, then broadcast back over x.
  Value* dyk = keepdims_ || axes.empty() ? dy : g.op("Unsqueeze", {dy, g.ints(axes)});
  Value* yk = keepdims_ || axes.empty() ? y : g.op("Unsqueeze", {y, g.ints(axes)});
  Value* full = g.op("Expand", {dyk, g.shape(x)});
  switch (kind_) {
    case Reduce::kSum: return g.set_dx(0, full);
    case Reduce::kMean: {
      Value* count = g.div(g.op("Cast", {g.op("Size", {x})}, {{"to", int64_t(x->dtype)}}),
                           g.op("Cast", {g.op("Size", {y})}, {{"to", int64_t(x->dtype)}}));
      return g.set_dx(0, g.div(full, count));
    }
    case Reduce::kMax:
    case Reduce::kMin: return g.set_dx(0, g.where_or_zero(g.op("Equal", {x, yk}), full));
    case Reduce::kProd: return g.set_dx(0, g.div(g.mul(full, yk), x));
    case Reduce::kL1: return g.set_dx(0, g.mul(full, g.op("Sign", {x})));
    case Reduce::kL2: return g.set_dx(0, g.div(g.mul(full, x), yk));
    case Reduce::kSumSquare: return g.set_dx(0, g.mul(full, g.mul(g.like(2, x), x)));
    case Reduce::kLogSum: return g.set_dx(0, g.div(full, g.op("Exp", {yk})));
    case Reduce::kLogSumExp: return g.set_dx(0, g.mul(full, g.op("Exp", {g.sub(x, yk)})));
  }
}

OT_REGISTER_OP("ReduceSum", ReduceOp);
OT_REGISTER_OP("ReduceMean", ReduceOp);
OT_REGISTER_OP("ReduceMax", ReduceOp);
OT_REGISTER_OP("ReduceMin", ReduceOp);
OT_REGISTER_OP("ReduceProd", ReduceOp);
OT_REGISTER_OP("ReduceL1", ReduceOp);
OT_REGISTER_OP("ReduceL2", ReduceOp);
OT_REGISTER_OP("ReduceSumSquare", ReduceOp);
OT_REGISTER_OP("ReduceLogSum", ReduceOp);
OT_REGISTER_OP("ReduceLogSumExp", ReduceOp);

class ArgReduceOp : public Op {
 public:
  explicit ArgReduceOp(const ir::Node& n)
      : max_(n.op_type == "ArgMax"), axis_(n.attr_int("axis", 0)), keepdims_(n.attr_int("keepdims", 1)),
        last_(n.attr_int("select_last_index", 0)) {}
  DType output_dtype(size_t, const std::vector<DType>&) const override { return DType::kInt64; }
  void infer(InferCtx& ctx) const override {
    int64_t a = ctx.axis(axis_, ctx.rank(0));
    Shape out = ctx.shape(0);
    if (keepdims_) out[size_t(a)] = Dim(1);
    else out.erase(out.begin() + a);
    ctx.set(0, DType::kInt64, out);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& x = c.in(0);
    AxisView v = axis_view(x.dims(), axis_ < 0 ? axis_ + x.rank() : axis_);
    int64_t* out = c.out(0).data<int64_t>();
    kernels::dispatch<kernels::kNumeric>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = x.data<T>();
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t i = 0; i < v.inner; ++i) {
          const T* row = p + o * v.n * v.inner + i;
          int64_t best = 0;
          for (int64_t k = 1; k < v.n; ++k) {
            T a = row[k * v.inner], b = row[best * v.inner];
            bool better = max_ ? (last_ ? a >= b : a > b) : (last_ ? a <= b : a < b);
            if (better) best = k;
          }
          out[o * v.inner + i] = best;
        }
    });
  }

 private:
  bool max_;
  int64_t axis_;
  bool keepdims_, last_;
};
OT_REGISTER_OP("ArgMax", ArgReduceOp);
OT_REGISTER_OP("ArgMin", ArgReduceOp);

}  // namespace
}  // namespace onnxtrain::ops
