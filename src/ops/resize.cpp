// Resize: nearest, linear and cubic, every coordinate transformation mode,
// scales or sizes (with axes and keep_aspect_ratio_policy). Separable: each
// resized axis is resampled in turn, innermost first.
#include "ops/resize.h"

#include <cmath>

#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

// Upsample (opsets 7-9, deprecated since) is Resize-10's layout, (X, scales) or scales as an attribute before 9,
// sampling as PyTorch's upsampling does: asymmetric coordinates, the nearest sample's index floored.
ResizeAttrs resize_attrs(const ir::Node& n) {
  const bool upsample = n.op_type == "Upsample";
  ResizeAttrs a{
      &n,
      n.attr_string("mode", "nearest") == "bilinear" ? "linear" : n.attr_string("mode", "nearest"),
      n.attr_string("coordinate_transformation_mode", n.opset == 10 || upsample ? "asymmetric" : "half_pixel"),
      n.attr_string("nearest_mode", upsample ? "floor" : "round_prefer_floor"),
      n.attr_string("keep_aspect_ratio_policy", "stretch"),
      n.attr_float("cubic_coeff_a", -0.75f),
      n.attr_float("extrapolation_value", 0),
      n.attr_int("exclude_outside", 0) != 0,
      n.attr_ints("axes"),
      n.opset == 10 || upsample};
  for (float f : n.attr_floats("scales")) a.fixed_scales.push_back(f);
  if (n.attr_int("antialias", 0)) throw UnsupportedError(n.where() + ": antialias=1 is not supported");
  if (a.mode != "nearest" && a.mode != "linear" && a.mode != "cubic")
    throw ModelError(n.where() + ": mode '" + a.mode + "' is not nearest, linear or cubic");
  return a;
}

class ResizeOp : public OpWith<ResizeAttrs> {
 public:
  uint64_t host_inputs() const override { return input_bits({1, 2, 3}); }
  explicit ResizeOp(const ir::Node& n) : OpWith(resize_attrs(n)) {}

  // Symbolic input dims (a dynamic batch, say) stay symbolic where the axis is not resized, and scale by an
  // integer factor; other resized symbolic dims get a fresh symbol.
  void infer(InferCtx& ctx) const override {
    const Shape& x = ctx.shape(0);
    std::vector<int64_t> in;
    bool symbolic = false;
    for (auto& d : x) {
      symbolic = symbolic || !d.is_const();
      in.push_back(d.is_const() ? d.value() : 1);  // (a stand-in: the scales and sizes do not depend on it)
    }
    if (symbolic && attrs.policy != "stretch")
      ctx.unknown("the output size of a symbolic dim under keep_aspect_ratio_policy");
    const Tensor* scales = ctx.tensor(attrs.opset10 ? 1 : 2);
    bool by_sizes = !attrs.opset10 && ctx.has(3) && (!scales || scales->numel() == 0);
    const std::vector<Dim>* sizes = by_sizes ? ctx.value(3) : nullptr;
    if (sizes && attrs.policy == "stretch") {  // sizes known symbolically (another tensor's shape, say)
      std::vector<int64_t> axes = attrs.resized_axes(ctx, x.size());
      if (sizes->size() != axes.size())
        ctx.fail("sizes has " + std::to_string(sizes->size()) + " entries for " + std::to_string(axes.size()) +
                 " axes");
      Shape out = x;
      for (size_t i = 0; i < axes.size(); ++i) out[size_t(axes[i])] = (*sizes)[i];
      return ctx.set(0, ctx.dtype(0), out);
    }
    auto g = attrs.geometry(ctx, in);
    if (!g && ctx.at_runtime()) ctx.unknown("scales or sizes");
    if (!g) {  // scales or sizes computed from data (a size taken from another tensor's shape): the rank is known
      Shape out;
      for (size_t a = 0; a < x.size(); ++a) out.push_back(ctx.fresh("resized"));
      return ctx.set(0, ctx.dtype(0), out);
    }
    Shape out;  // from scales
    for (size_t a = 0; a < x.size(); ++a) {
      double s = g->scale[a];
      if (x[a].is_const())
        out.push_back(Dim(g->out[a]));
      else if (attrs.unchanged(*g, int64_t(a), in[a]))
        out.push_back(x[a]);
      else if (attrs.coord != "tf_crop_and_resize" && s >= 1 && s == std::floor(s))
        out.push_back(x[a] * Dim(int64_t(s)));
      else
        out.push_back(ctx.fresh("resized"));
    }
    ctx.set(0, ctx.dtype(0), out);
  }

  // The adjoint of the resampling (each axis's taps transposed, axes in the opposite order), by
  // com.onnxtrain.ResizeGrad(shape of X, roi, scales, sizes, dY): X itself is not stashed.
  void grad(GradCtx& g) const override {
    if (!g.needs(0)) return;
    ir::Attributes a = attrs.node->attrs;
    a["mode"] = attrs.mode;  // (defaults and names depend on the op and the opset)
    a["coordinate_transformation_mode"] = attrs.coord;
    a["nearest_mode"] = attrs.nearest;
    ir::Value *roi = attrs.opset10 ? nullptr : g.x(1), *scales = g.x(attrs.opset10 ? 1 : 2),
              *sizes = attrs.opset10 ? nullptr : g.x(3);
    g.set_dx(0, g.ops("ResizeGrad", {g.shape(g.x(0)), roi, scales, sizes, g.dy(0)}, 1, a, "com.onnxtrain")[0]);
  }
};

// com.onnxtrain.ResizeGrad(shape of X, roi, scales, sizes, dY) with Resize's attributes: dX, each output's
// gradient sent back to the input positions it was sampled from, times their weights.
class ResizeGradOp : public ResizeOp {
 public:
  uint64_t host_inputs() const override { return input_bits({0, 1, 2, 3}); }
  explicit ResizeGradOp(const ir::Node& n) : ResizeOp(n) {}
  void grad(GradCtx& g) const override { no_gradient(g); }
  void infer(InferCtx& ctx) const override {
    const std::vector<Dim>* v = ctx.value(0);
    if (!v) ctx.fail("the shape of X must be known when the graph is built");
    if (ctx.rank(4) != int64_t(v->size()))
      ctx.fail("dY " + shape_str(ctx.shape(4)) + " and X " + shape_str(Shape(v->begin(), v->end())) +
               " differ in rank");
    ctx.set(0, ctx.dtype(4), Shape(v->begin(), v->end()));
  }
};
const bool kRegistered = register_ops({{"", "Resize", factory<ResizeOp>()},
                                       {"", "Upsample", factory<ResizeOp>()},
                                       {"com.onnxtrain", "ResizeGrad", factory<ResizeGradOp>()}});

// An output size computed from the scales: a typed error when it is no size at all (NaN, negative, or past any
// tensor a 64-bit process could hold).
int64_t output_size(InferCtx& ctx, double size) {
  if (!(size >= 0 && size <= double(int64_t(1) << 53)))
    ctx.fail("the scales give an output size of " + std::to_string(size));
  return int64_t(size);
}

}  // namespace

std::optional<ResizeAttrs::Geometry> ResizeAttrs::geometry(InferCtx& ctx, const std::vector<int64_t>& in) const {
  size_t r = in.size();
  std::vector<int64_t> axes = resized_axes(ctx, r);
  Geometry g{std::vector<double>(r, 1.0), in, std::vector<double>(r, 0.0), std::vector<double>(r, 1.0)};
  size_t scales_at = opset10 ? 1 : 2, sizes_at = 3;
  const Tensor* roi = opset10 ? nullptr : ctx.tensor(1);
  if (roi && roi->numel() == int64_t(2 * axes.size())) {
    auto v = roi->to_double();
    for (size_t i = 0; i < axes.size(); ++i) {
      g.roi_start[size_t(axes[i])] = v[i];
      g.roi_end[size_t(axes[i])] = v[i + axes.size()];
    }
  }
  const Tensor* scales = ctx.tensor(scales_at);
  if (fixed_scales.empty() && ctx.has(sizes_at) && (!scales || scales->numel() == 0)) {
    auto sizes = ctx.int_values(sizes_at);
    if (!sizes) return std::nullopt;
    if (sizes->size() != axes.size())
      ctx.fail("sizes has " + std::to_string(sizes->size()) + " entries for " + std::to_string(axes.size()) + " axes");
    if (policy == "stretch") {
      for (size_t i = 0; i < axes.size(); ++i) {
        size_t a = size_t(axes[i]);
        g.out[a] = (*sizes)[i];
        g.scale[a] = double(g.out[a]) / double(in[a]);
      }
    } else {
      double s = policy == "not_larger" ? INFINITY : -INFINITY;
      for (size_t i = 0; i < axes.size(); ++i) {
        double q = double((*sizes)[i]) / double(in[size_t(axes[i])]);
        s = policy == "not_larger" ? std::min(s, q) : std::max(s, q);
      }
      for (auto a : axes) {
        g.scale[size_t(a)] = s;
        g.out[size_t(a)] = output_size(ctx, std::floor(s * double(in[size_t(a)]) + 0.5));
      }
    }
    return g;
  }
  if (!scales && fixed_scales.empty()) return std::nullopt;
  std::vector<double> sv = fixed_scales.empty() ? scales->to_double() : fixed_scales;
  if (sv.size() != axes.size())
    ctx.fail("scales has " + std::to_string(sv.size()) + " entries for " + std::to_string(axes.size()) + " axes");
  for (size_t i = 0; i < axes.size(); ++i) {
    size_t a = size_t(axes[i]);
    g.scale[a] = sv[i];
    double span = coord == "tf_crop_and_resize" ? g.roi_end[a] - g.roi_start[a] : 1.0;
    g.out[a] = output_size(ctx, std::floor(double(in[a]) * span * sv[i]));
  }
  return g;
}

// The axes that `scales` / `sizes` list (all when the attribute is absent), non-negative.
std::vector<int64_t> ResizeAttrs::resized_axes(InferCtx& ctx, size_t rank) const {
  std::vector<int64_t> r = axes;
  if (r.empty())
    for (size_t i = 0; i < rank; ++i) r.push_back(int64_t(i));
  for (auto& a : r) a = ctx.axis(a, int64_t(rank));
  return r;
}

// Whether axis a keeps its size and samples (the resampling skips it).
bool ResizeAttrs::unchanged(const Geometry& g, int64_t a, int64_t in) const {
  return g.out[size_t(a)] == in && g.scale[size_t(a)] == 1.0 && coord != "tf_crop_and_resize";
}

}  // namespace onnxtrain::ops
