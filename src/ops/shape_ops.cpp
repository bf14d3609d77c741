// Ops that compute or change shapes without moving data: Shape, Size, Reshape,
// Flatten, Unsqueeze, Squeeze (views), Constant, ConstantOfShape, Range.
// Their shape functions propagate the values of small integer tensors
// symbolically, which is what keeps PyTorch's Shape/Gather/Concat/Reshape
// chains exact.
#include "ops/shape_ops.h"

#include <cmath>
#include <cstring>

#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

class ShapeOp : public OpWith<ShapeAttrs> {
 public:
  explicit ShapeOp(const ir::Node& n) : OpWith({n.attr_int("start", 0), n.attr_int("end", INT64_MAX)}) {}
  DType output_dtype(size_t, const std::vector<DType>&) const override { return DType::kInt64; }
  void infer(InferCtx& ctx) const override {
    int64_t r = ctx.rank(0);
    auto [s, e] = attrs.range(r);
    std::vector<Dim> v;
    for (int64_t i = s; i < e; ++i) v.push_back(ctx.shape(0)[size_t(i)]);
    ctx.set(0, DType::kInt64, {Dim(int64_t(v.size()))}, v);
  }
};

class SizeOp : public Op {
 public:
  explicit SizeOp(const ir::Node&) {}
  DType output_dtype(size_t, const std::vector<DType>&) const override { return DType::kInt64; }
  void infer(InferCtx& ctx) const override {
    ctx.set(0, DType::kInt64, {}, std::vector<Dim>{shape_numel(ctx.shape(0))});
  }
};

// Base of the view ops: the output shape is all that differs, so the gradient
// is the output gradient viewed in the input's shape.
class ViewOp : public Op {
 public:
  bool is_view() const override { return true; }
  bool recomputable() const override { return true; }
  void grad(GradCtx& g) const override { g.set_dx(0, g.reshape(g.dy(0), g.shape(g.x(0)))); }
};

class ReshapeOp : public ViewOp {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  explicit ReshapeOp(const ir::Node& n) : allowzero_(n.attr_int("allowzero", 0)) {}
  void infer(InferCtx& ctx) const override {
    const std::vector<Dim>* target = ctx.value(1);
    if (!target) {
      if (ctx.rank(1) != 1 || !ctx.shape(1)[0].is_const()) ctx.unknown("the target shape's rank");
      Shape s;
      for (int64_t i = 0; i < ctx.shape(1)[0].value(); ++i) s.push_back(ctx.fresh("reshape"));
      return ctx.set(0, ctx.dtype(0), s);
    }
    const Shape& in = ctx.shape(0);
    Shape out(target->begin(), target->end());
    int infer_at = -1;
    Dim known(1);
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] == Dim(0) && !allowzero_) {
        if (i >= in.size()) ctx.fail("shape value 0 at index " + std::to_string(i) + " has no input dim to copy");
        out[i] = in[i];
      }
      if (out[i] == Dim(-1)) {
        if (infer_at >= 0) ctx.fail("more than one -1 in target shape " + shape_str(out));
        infer_at = int(i);
      } else {
        known = known * out[i];
      }
    }
    Dim numel = shape_numel(in);
    if (infer_at >= 0) {
      if (known == Dim(0)) ctx.fail("cannot infer -1 with a zero-sized target " + shape_str(out));
      Dim q = Dim::floor_div(numel, known);
      if (q.is_const() && numel.is_const() && known.is_const() && q.value() * known.value() != numel.value())
        ctx.fail("cannot reshape " + shape_str(in) + " to " + shape_str(out));
      out[size_t(infer_at)] = q;
    } else if (numel.is_const() && known.is_const() && numel.value() != known.value()) {
      ctx.fail("cannot reshape " + shape_str(in) + " (" + numel.str() + " elements) to " + shape_str(out));
    }
    bool ints = ctx.dtype(0) == DType::kInt64 || ctx.dtype(0) == DType::kInt32;
    ctx.set(0, ctx.dtype(0), out, ints ? ctx.propagated_opt(0) : std::nullopt);
  }

 private:
  bool allowzero_;
};

class FlattenOp : public ViewOp {
 public:
  explicit FlattenOp(const ir::Node& n) : axis_(n.attr_int("axis", 1)) {}
  void infer(InferCtx& ctx) const override {
    int64_t r = ctx.rank(0);
    if (axis_ < -r || axis_ > r)
      ctx.fail("axis " + std::to_string(axis_) + " out of range for rank " + std::to_string(r));
    int64_t a = axis_ < 0 ? axis_ + r : axis_;
    Dim outer(1), inner(1);
    for (int64_t i = 0; i < r; ++i) (i < a ? outer : inner) = (i < a ? outer : inner) * ctx.shape(0)[size_t(i)];
    ctx.set(0, ctx.dtype(0), {outer, inner});
  }

 private:
  int64_t axis_;
};

// Axes come from an attribute (older opsets) or from input 1.
std::optional<std::vector<int64_t>> axes_of(InferCtx& ctx, const std::vector<int64_t>& attr, bool has_attr) {
  if (has_attr) return attr;
  if (!ctx.has(1)) return std::nullopt;
  auto v = ctx.int_values(1);
  if (!v) ctx.unknown("axes");
  return v;
}

class UnsqueezeOp : public ViewOp {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  explicit UnsqueezeOp(const ir::Node& n) : axes_(n.attr_ints("axes")), has_attr_(n.has_attr("axes")) {}
  void infer(InferCtx& ctx) const override {
    auto axes = axes_of(ctx, axes_, has_attr_);
    if (!axes) ctx.fail("axes are required");
    int64_t r = ctx.rank(0) + int64_t(axes->size());
    std::vector<bool> is_new(size_t(r), false);
    for (int64_t a : *axes) {
      int64_t x = ctx.axis(a, r);
      if (is_new[size_t(x)]) ctx.fail("axis " + std::to_string(a) + " repeats");
      is_new[size_t(x)] = true;
    }
    Shape out;
    size_t k = 0;
    for (int64_t i = 0; i < r; ++i) out.push_back(is_new[size_t(i)] ? Dim(1) : ctx.shape(0)[k++]);
    ctx.set(0, ctx.dtype(0), out, ctx.propagated_opt(0));
  }

 private:
  std::vector<int64_t> axes_;
  bool has_attr_;
};

class SqueezeOp : public ViewOp {
 public:
  uint64_t host_inputs() const override { return input_bits({1}); }
  explicit SqueezeOp(const ir::Node& n) : axes_(n.attr_ints("axes")), has_attr_(n.has_attr("axes")) {}
  void infer(InferCtx& ctx) const override {
    auto axes = axes_of(ctx, axes_, has_attr_);
    int64_t r = ctx.rank(0);
    std::vector<bool> drop(size_t(r), false);
    if (axes) {
      for (int64_t a : *axes) {
        int64_t x = ctx.axis(a, r);
        const Dim& d = ctx.shape(0)[size_t(x)];
        if (d.is_const() && d.value() != 1)
          ctx.fail("cannot squeeze axis " + std::to_string(a) + " of size " + d.str());
        drop[size_t(x)] = true;
      }
    } else {
      for (int64_t i = 0; i < r; ++i) drop[size_t(i)] = ctx.shape(0)[size_t(i)] == Dim(1);
    }
    Shape out;
    for (int64_t i = 0; i < r; ++i)
      if (!drop[size_t(i)]) out.push_back(ctx.shape(0)[size_t(i)]);
    ctx.set(0, ctx.dtype(0), out, ctx.propagated_opt(0));
  }

 private:
  std::vector<int64_t> axes_;
  bool has_attr_;
};

template <typename T>
Tensor scalar(DType t, T v, std::vector<int64_t> dims) {
  Tensor r(t, std::move(dims));
  *r.data<T>() = v;
  return r;
}

Tensor constant_value(const ir::Node& n) {
  Tensor value;
  if (const Tensor* t = n.attr_tensor("value"))
    value = *t;
  else if (n.has_attr("value_float"))
    value = scalar<float>(DType::kFloat32, n.attr_float("value_float", 0), {});
  else if (n.has_attr("value_int"))
    value = scalar<int64_t>(DType::kInt64, n.attr_int("value_int"), {});
  else if (n.has_attr("value_floats")) {
    auto v = n.attr_floats("value_floats");
    value = Tensor(DType::kFloat32, {int64_t(v.size())});
    std::memcpy(value.raw(), v.data(), v.size() * 4);
  } else if (n.has_attr("value_ints")) {
    auto v = n.attr_ints("value_ints");
    value = Tensor(DType::kInt64, {int64_t(v.size())});
    std::memcpy(value.raw(), v.data(), v.size() * 8);
  } else {
    throw UnsupportedError(n.where() + ": only tensor, float(s) and int(s) constants are supported");
  }
  return value;
}

class ConstantOp : public OpWith<ValueAttrs> {
 public:
  explicit ConstantOp(const ir::Node& n) : OpWith({constant_value(n)}) {}
  void infer(InferCtx& ctx) const override {
    std::optional<std::vector<Dim>> v;
    if ((attrs.value.dtype() == DType::kInt64 || attrs.value.dtype() == DType::kInt32) && attrs.value.numel() <= 4096) {
      auto iv = attrs.value.to_int64();
      v = std::vector<Dim>(iv.begin(), iv.end());
    }
    ctx.set(0, attrs.value.dtype(), const_shape(attrs.value.dims()), v);
  }
};

class ConstantOfShapeOp : public OpWith<ValueAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({0}); }
  explicit ConstantOfShapeOp(const ir::Node& n)
      : OpWith({n.attr_tensor("value") ? *n.attr_tensor("value") : Tensor::zeros(DType::kFloat32, {1})}) {}
  DType output_dtype(size_t, const std::vector<DType>&) const override { return attrs.value.dtype(); }
  void infer(InferCtx& ctx) const override {
    const std::vector<Dim>* v = ctx.value(0);
    Shape s;
    if (v)
      s.assign(v->begin(), v->end());
    else if (ctx.rank(0) == 1 && ctx.shape(0)[0].is_const())
      for (int64_t i = 0; i < ctx.shape(0)[0].value(); ++i) s.push_back(ctx.fresh("cos"));
    else
      ctx.fail("the shape input has unknown length");
    std::optional<std::vector<Dim>> val;
    if (attrs.value.dtype() == DType::kInt64 && s.size() == 1 && s[0].is_const() && s[0].value() >= 0 &&
        s[0].value() <= 64)
      val = std::vector<Dim>(size_t(s[0].value()), Dim(attrs.value.to_int64()[0]));
    ctx.set(0, attrs.value.dtype(), s, val);
  }
};

class RangeOp : public Op {
 public:
  uint64_t host_inputs() const override { return input_bits({0, 1, 2}); }
  explicit RangeOp(const ir::Node&) {}
  void infer(InferCtx& ctx) const override {
    for (size_t i = 0; i < 3; ++i)
      if (ctx.rank(i) != 0) ctx.fail("input " + std::to_string(i) + " is not a scalar");
    Dim n;
    auto s = ctx.value(0), l = ctx.value(1), d = ctx.value(2);
    if (s && l && d && (*d)[0].is_const() && (*d)[0].value() != 0) {
      int64_t step = (*d)[0].value();
      Dim span = (*l)[0] - (*s)[0];
      n = step > 0 ? Dim::max(Dim(0), Dim::ceil_div(span, Dim(step)))
                   : Dim::max(Dim(0), Dim::ceil_div(Dim(0) - span, Dim(-step)));
    } else if (ctx.tensor(0) && ctx.tensor(1) && ctx.tensor(2)) {
      double st = ctx.tensor(0)->to_double()[0], li = ctx.tensor(1)->to_double()[0], de = ctx.tensor(2)->to_double()[0];
      if (de == 0) ctx.fail("delta is zero");
      double count = std::ceil((li - st) / de);
      if (!(count < 9.2e18))  // NaN and counts past int64 too
        ctx.fail("start " + std::to_string(st) + ", limit " + std::to_string(li) + " and delta " + std::to_string(de) +
                 " give no countable number of elements");
      n = Dim(count > 0 ? int64_t(count) : 0);
    } else {
      n = ctx.fresh("range");
    }
    ctx.set(0, ctx.dtype(0), {n});
  }
};

const bool kRegistered = register_ops({
    {"", "Shape", factory<ShapeOp>()},
    {"", "Size", factory<SizeOp>()},
    {"", "Reshape", factory<ReshapeOp>()},
    {"", "Flatten", factory<FlattenOp>()},
    {"", "Unsqueeze", factory<UnsqueezeOp>()},
    {"", "Squeeze", factory<SqueezeOp>()},
    {"", "Constant", factory<ConstantOp>()},
    {"", "ConstantOfShape", factory<ConstantOfShapeOp>()},
    {"", "Range", factory<RangeOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
