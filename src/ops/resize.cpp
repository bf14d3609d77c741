// Resize: nearest, linear and cubic, every coordinate transformation mode,
// scales or sizes (with axes and keep_aspect_ratio_policy). Separable: each
// resized axis is resampled in turn, innermost first.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "ops/axis_util.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

struct Tap {
  std::vector<int64_t> index;
  std::vector<double> weight;
  bool extrapolate = false;
};

class ResizeOp : public Op {
 public:
  explicit ResizeOp(const ir::Node& n)
      : node_(n), mode_(n.attr_string("mode", "nearest")),
        coord_(n.attr_string("coordinate_transformation_mode", n.opset == 10 ? "asymmetric" : "half_pixel")),
        nearest_(n.attr_string("nearest_mode", "round_prefer_floor")), policy_(n.attr_string("keep_aspect_ratio_policy", "stretch")),
        cubic_a_(n.attr_float("cubic_coeff_a", -0.75f)), extrapolation_(n.attr_float("extrapolation_value", 0)),
        exclude_outside_(n.attr_int("exclude_outside", 0)), axes_(n.attr_ints("axes")), opset10_(n.opset == 10) {
    if (n.attr_int("antialias", 0)) throw UnsupportedError(n.where() + ": antialias=1 is not supported");
    if (mode_ != "nearest" && mode_ != "linear" && mode_ != "cubic")
      throw ModelError(n.where() + ": mode '" + mode_ + "' is not nearest, linear or cubic");
  }

  // Per-axis scales and output sizes (concrete), from scales or sizes.
  struct Geometry {
    std::vector<double> scale;
    std::vector<int64_t> out;
    std::vector<double> roi_start, roi_end;
  };
  std::optional<Geometry> geometry(InferCtx& ctx, const std::vector<int64_t>& in) const {
    size_t r = in.size();
    std::vector<int64_t> axes = resized_axes(ctx, r);
    Geometry g{std::vector<double>(r, 1.0), in, std::vector<double>(r, 0.0), std::vector<double>(r, 1.0)};
    size_t scales_at = opset10_ ? 1 : 2, sizes_at = 3;
    const Tensor* roi = opset10_ ? nullptr : ctx.tensor(1);
    if (roi && roi->numel() == int64_t(2 * axes.size())) {
      auto v = roi->to_double();
      for (size_t i = 0; i < axes.size(); ++i) {
        g.roi_start[size_t(axes[i])] = v[i];
        g.roi_end[size_t(axes[i])] = v[i + axes.size()];
      }
    }
    const Tensor* scales = ctx.tensor(scales_at);
    if (ctx.has(sizes_at) && (!scales || scales->numel() == 0)) {
      auto sizes = ctx.int_values(sizes_at);
      if (!sizes) return std::nullopt;
      if (sizes->size() != axes.size()) ctx.fail("sizes has " + std::to_string(sizes->size()) + " entries for " + std::to_string(axes.size()) + " axes");
      if (policy_ == "stretch") {
        for (size_t i = 0; i < axes.size(); ++i) {
          size_t a = size_t(axes[i]);
          g.out[a] = (*sizes)[i];
          g.scale[a] = double(g.out[a]) / double(in[a]);
        }
      } else {
        double s = policy_ == "not_larger" ? INFINITY : -INFINITY;
        for (size_t i = 0; i < axes.size(); ++i) {
          double q = double((*sizes)[i]) / double(in[size_t(axes[i])]);
          s = policy_ == "not_larger" ? std::min(s, q) : std::max(s, q);
        }
        for (auto a : axes) {
          g.scale[size_t(a)] = s;
          g.out[size_t(a)] = int64_t(std::floor(s * double(in[size_t(a)]) + 0.5));
        }
      }
      return g;
    }
    if (!scales) return std::nullopt;
    auto sv = scales->to_double();
    if (sv.size() != axes.size()) ctx.fail("scales has " + std::to_string(sv.size()) + " entries for " + std::to_string(axes.size()) + " axes");
    for (size_t i = 0; i < axes.size(); ++i) {
      size_t a = size_t(axes[i]);
      g.scale[a] = sv[i];
      double span = coord_ == "tf_crop_and_resize" ? g.roi_end[a] - g.roi_start[a] : 1.0;
      g.out[a] = int64_t(std::floor(double(in[a]) * span * sv[i]));
    }
    return g;
  }

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
    if (symbolic && policy_ != "stretch") ctx.unknown("the output size of a symbolic dim under keep_aspect_ratio_policy");
    const Tensor* scales = ctx.tensor(opset10_ ? 1 : 2);
    bool by_sizes = !opset10_ && ctx.has(3) && (!scales || scales->numel() == 0);
    const std::vector<Dim>* sizes = by_sizes ? ctx.value(3) : nullptr;
    if (sizes && policy_ == "stretch") {  // sizes known symbolically (another tensor's shape, say)
      std::vector<int64_t> axes = resized_axes(ctx, x.size());
      if (sizes->size() != axes.size())
        ctx.fail("sizes has " + std::to_string(sizes->size()) + " entries for " + std::to_string(axes.size()) + " axes");
      Shape out = x;
      for (size_t i = 0; i < axes.size(); ++i) out[size_t(axes[i])] = (*sizes)[i];
      return ctx.set(0, ctx.dtype(0), out);
    }
    auto g = geometry(ctx, in);
    if (!g) ctx.unknown("scales or sizes");
    Shape out;  // from scales
    for (size_t a = 0; a < x.size(); ++a) {
      double s = g->scale[a];
      if (x[a].is_const()) out.push_back(Dim(g->out[a]));
      else if (unchanged(*g, int64_t(a), in[a])) out.push_back(x[a]);
      else if (coord_ != "tf_crop_and_resize" && s >= 1 && s == std::floor(s)) out.push_back(x[a] * Dim(int64_t(s)));
      else out.push_back(ctx.fresh("resized"));
    }
    ctx.set(0, ctx.dtype(0), out);
  }

  // The adjoint of the resampling (each axis's taps transposed, axes in the opposite order), by
  // com.onnxtrain.ResizeGrad(shape of X, roi, scales, sizes, dY): X itself is not stashed.
  void grad(GradCtx& g) const override {
    if (!g.needs(0)) return;
    ir::Attributes attrs = node_.attrs;
    attrs["coordinate_transformation_mode"] = coord_;  // (its default depends on the opset)
    ir::Value *roi = opset10_ ? nullptr : g.x(1), *scales = g.x(opset10_ ? 1 : 2), *sizes = opset10_ ? nullptr : g.x(3);
    g.set_dx(0, g.ops("ResizeGrad", {g.shape(g.x(0)), roi, scales, sizes, g.dy(0)}, 1, attrs, "com.onnxtrain")[0]);
  }

  void compute(ComputeCtx& c) const override {
    const Tensor& X = c.in(0);
    auto g = *geometry(*c.shapes, X.dims());
    kernels::dispatch<kernels::kNumeric>(X.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<double> cur(X.numel());
      const T* xp = X.data<T>();
      for (int64_t i = 0; i < X.numel(); ++i) cur[size_t(i)] = double(xp[i]);
      std::vector<int64_t> dims = X.dims();
      for (int64_t a = X.rank() - 1; a >= 0; --a) {
        if (unchanged(g, a, dims[size_t(a)])) continue;
        auto taps = make_taps(dims[size_t(a)], g.out[size_t(a)], g.scale[size_t(a)], g.roi_start[size_t(a)], g.roi_end[size_t(a)]);
        AxisView v = axis_view(dims, a);
        int64_t no = g.out[size_t(a)];
        std::vector<double> next(size_t(v.outer * no * v.inner));
        for (int64_t o = 0; o < v.outer; ++o)
          for (int64_t j = 0; j < no; ++j) {
            const Tap& t = taps[size_t(j)];
            for (int64_t i = 0; i < v.inner; ++i) {
              double acc = 0;
              if (t.extrapolate) acc = extrapolation_;
              else
                for (size_t k = 0; k < t.index.size(); ++k) acc += t.weight[k] * cur[size_t((o * v.n + t.index[k]) * v.inner + i)];
              next[size_t((o * no + j) * v.inner + i)] = acc;
            }
          }
        cur.swap(next);
        dims[size_t(a)] = no;
      }
      T* y = c.out(0).data<T>();
      for (size_t i = 0; i < cur.size(); ++i) y[i] = T(std::is_integral_v<T> ? std::nearbyint(cur[i]) : cur[i]);
    });
  }

 protected:
  // The axes that `scales` / `sizes` list (all when the attribute is absent), non-negative.
  std::vector<int64_t> resized_axes(InferCtx& ctx, size_t rank) const {
    std::vector<int64_t> axes = axes_;
    if (axes.empty())
      for (size_t i = 0; i < rank; ++i) axes.push_back(int64_t(i));
    for (auto& a : axes) a = ctx.axis(a, int64_t(rank));
    return axes;
  }
  // Whether axis a keeps its size and samples (the resampling skips it).
  bool unchanged(const Geometry& g, int64_t a, int64_t in) const {
    return g.out[size_t(a)] == in && g.scale[size_t(a)] == 1.0 && coord_ != "tf_crop_and_resize";
  }

  double original_coord(int64_t x, int64_t in, int64_t out, double scale, double rs, double re) const {
    double xr = double(x);
    if (coord_ == "half_pixel") return (xr + 0.5) / scale - 0.5;
    if (coord_ == "half_pixel_symmetric") {
      double adjustment = double(out) / (scale * double(in));
      double offset = double(in) / 2.0 * (1 - adjustment);
      return offset + (xr + 0.5) / scale - 0.5;
    }
    if (coord_ == "pytorch_half_pixel") return out > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
    if (coord_ == "align_corners") {  // the resized length may be fractional (from a scale)
      double out_f = scale * double(in);
      return out_f == 1.0 ? 0.0 : xr * double(in - 1) / (out_f - 1);
    }
    if (coord_ == "tf_half_pixel_for_nn") return (xr + 0.5) / scale;
    if (coord_ == "asymmetric") return xr / scale;
    if (coord_ == "tf_crop_and_resize")
      return out > 1 ? rs * double(in - 1) + xr * (re - rs) * double(in - 1) / double(out - 1) : 0.5 * (rs + re) * double(in - 1);
    throw ModelError("Resize: coordinate_transformation_mode '" + coord_ + "' is not supported");
  }

  std::vector<Tap> make_taps(int64_t in, int64_t out, double scale, double rs, double re) const {
    auto taps = std::vector<Tap>(size_t(out));
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    for (int64_t x = 0; x < out; ++x) {
      Tap& t = taps[size_t(x)];
      double xo = original_coord(x, in, out, scale, rs, re);
      if (coord_ == "tf_crop_and_resize" && (xo < 0 || xo > double(in - 1))) {
        t.extrapolate = true;
        continue;
      }
      if (mode_ == "nearest") {
        double r;
        if (nearest_ == "round_prefer_ceil") r = std::floor(xo + 0.5);
        else if (nearest_ == "floor") r = std::floor(xo);
        else if (nearest_ == "ceil") r = std::ceil(xo);
        else r = (xo == std::floor(xo) + 0.5) ? std::floor(xo) : std::round(xo);
        t.index = {clamp(int64_t(r))};
        t.weight = {1.0};
      } else if (mode_ == "linear") {
        double f = std::floor(xo), w = xo - f;
        int64_t i0 = int64_t(f);
        if (xo < 0 || xo > double(in - 1)) {  // outside: the edge value
          t.index = {clamp(i0 < 0 ? 0 : in - 1)};
          t.weight = {1.0};
        } else {
          t.index = {clamp(i0), clamp(i0 + 1)};
          t.weight = {1 - w, w};
        }
      } else {
        double f = std::floor(xo), s = xo - f, a = cubic_a_;
        double d[4] = {s + 1, s, 1 - s, 2 - s};
        double sum = 0;
        for (int k = 0; k < 4; ++k) {
          double z = std::abs(d[k]);
          double w = z <= 1 ? ((a + 2) * z - (a + 3)) * z * z + 1 : ((a * z - 5 * a) * z + 8 * a) * z - 4 * a;
          int64_t i = int64_t(f) - 1 + k;
          if (exclude_outside_ && (i < 0 || i >= in)) w = 0;
          t.index.push_back(clamp(i));
          t.weight.push_back(w);
          sum += w;
        }
        if (exclude_outside_ && sum != 0)
          for (auto& w : t.weight) w /= sum;
      }
    }
    return taps;
  }

  const ir::Node& node_;
  std::string mode_, coord_, nearest_, policy_;
  float cubic_a_, extrapolation_;
  bool exclude_outside_;
  std::vector<int64_t> axes_;
  bool opset10_;
};
OT_REGISTER_OP("Resize", ResizeOp);

// com.onnxtrain.ResizeGrad(shape of X, roi, scales, sizes, dY) with Resize's attributes: dX, each output's
// gradient sent back to the input positions it was sampled from, times their weights.
class ResizeGradOp : public ResizeOp {
 public:
  explicit ResizeGradOp(const ir::Node& n) : ResizeOp(n) {}
  void grad(GradCtx& g) const override { no_gradient(g); }
  void infer(InferCtx& ctx) const override {
    const std::vector<Dim>* v = ctx.value(0);
    if (!v) ctx.fail("the shape of X must be known when the graph is built");
    if (ctx.rank(4) != int64_t(v->size()))
      ctx.fail("dY " + shape_str(ctx.shape(4)) + " and X " + shape_str(Shape(v->begin(), v->end())) + " differ in rank");
    ctx.set(0, ctx.dtype(4), Shape(v->begin(), v->end()));
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& dY = c.in(4);
    std::vector<int64_t> in = c.in(0).to_int64();
    auto g = *geometry(*c.shapes, in);
    if (g.out != dY.dims()) c.fail("dY " + dims_str(dY.dims()) + " is not of the resized shape " + dims_str(g.out));
    kernels::dispatch<kernels::kFloats>(dY.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* dy = dY.data<T>();
      std::vector<double> cur(dy, dy + dY.numel());
      std::vector<int64_t> dims = g.out;
      for (int64_t a = 0; a < int64_t(in.size()); ++a) {  // the forward's last axis resampled first
        if (unchanged(g, a, in[size_t(a)])) continue;
        auto taps = make_taps(in[size_t(a)], g.out[size_t(a)], g.scale[size_t(a)], g.roi_start[size_t(a)], g.roi_end[size_t(a)]);
        AxisView v = axis_view(dims, a);
        int64_t ni = in[size_t(a)];
        std::vector<double> next(size_t(v.outer * ni * v.inner), 0.0);
        for (int64_t o = 0; o < v.outer; ++o)
          for (int64_t j = 0; j < v.n; ++j) {
            const Tap& t = taps[size_t(j)];
            if (t.extrapolate) continue;  // a constant: no gradient
            for (size_t k = 0; k < t.index.size(); ++k)
              for (int64_t i = 0; i < v.inner; ++i)
                next[size_t((o * ni + t.index[k]) * v.inner + i)] += t.weight[k] * cur[size_t((o * v.n + j) * v.inner + i)];
          }
        cur.swap(next);
        dims[size_t(a)] = ni;
      }
      T* dx = c.out(0).data<T>();
      for (size_t i = 0; i < cur.size(); ++i) dx[i] = T(cur[i]);
    });
  }
};
const bool kResizeGradRegistered = register_op("com.onnxtrain", "ResizeGrad", factory<ResizeGradOp>());

}  // namespace
}  // namespace onnxtrain::ops
