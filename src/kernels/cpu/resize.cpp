// Resize (nearest, linear and cubic, every coordinate transformation mode, scales or sizes), separable: each resized
// axis resampled in turn, innermost first; and its adjoint com.onnxtrain.ResizeGrad (axes in the opposite order).
#include "ops/resize.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/kernel.h"
#include "onnxtrain/error.h"
#include "ops/axis_util.h"

namespace onnxtrain::kernels {
namespace {

// The input positions and weights one output position of one axis samples.
struct Tap {
  std::vector<int64_t> index;
  std::vector<double> weight;
  bool extrapolate = false;
};

double original_coord(const ops::ResizeAttrs& at, int64_t x, int64_t in, int64_t out, double scale, double rs,
                      double re) {
  double xr = double(x);
  if (at.coord == "half_pixel") return (xr + 0.5) / scale - 0.5;
  if (at.coord == "half_pixel_symmetric") {
    double adjustment = double(out) / (scale * double(in));
    double offset = double(in) / 2.0 * (1 - adjustment);
    return offset + (xr + 0.5) / scale - 0.5;
  }
  if (at.coord == "pytorch_half_pixel") return out > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
  if (at.coord == "align_corners") {  // the resized length may be fractional (from a scale)
    double out_f = scale * double(in);
    return out_f == 1.0 ? 0.0 : xr * double(in - 1) / (out_f - 1);
  }
  if (at.coord == "tf_half_pixel_for_nn") return (xr + 0.5) / scale;
  if (at.coord == "asymmetric") return xr / scale;
  if (at.coord == "tf_crop_and_resize")
    return out > 1 ? rs * double(in - 1) + xr * (re - rs) * double(in - 1) / double(out - 1)
                   : 0.5 * (rs + re) * double(in - 1);
  throw ModelError("Resize: coordinate_transformation_mode '" + at.coord + "' is not supported");
}

std::vector<Tap> make_taps(const ops::ResizeAttrs& at, int64_t in, int64_t out, double scale, double rs, double re) {
  auto taps = std::vector<Tap>(size_t(out));
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  for (int64_t x = 0; x < out; ++x) {
    Tap& t = taps[size_t(x)];
    double xo = original_coord(at, x, in, out, scale, rs, re);
    if (at.coord == "tf_crop_and_resize" && (xo < 0 || xo > double(in - 1))) {
      t.extrapolate = true;
      continue;
    }
    if (at.mode == "nearest") {
      double r;
      if (at.nearest == "round_prefer_ceil")
        r = std::floor(xo + 0.5);
      else if (at.nearest == "floor")
        r = std::floor(xo);
      else if (at.nearest == "ceil")
        r = std::ceil(xo);
      else
        r = (xo == std::floor(xo) + 0.5) ? std::floor(xo) : std::round(xo);
      t.index = {clamp(int64_t(r))};
      t.weight = {1.0};
    } else if (at.mode == "linear") {
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
      double f = std::floor(xo), s = xo - f, a = at.cubic_a;
      double d[4] = {s + 1, s, 1 - s, 2 - s};
      double sum = 0;
      for (int k = 0; k < 4; ++k) {
        double z = std::abs(d[k]);
        double w = z <= 1 ? ((a + 2) * z - (a + 3)) * z * z + 1 : ((a * z - 5 * a) * z + 8 * a) * z - 4 * a;
        int64_t i = int64_t(f) - 1 + k;
        if (at.exclude_outside && (i < 0 || i >= in)) w = 0;
        t.index.push_back(clamp(i));
        t.weight.push_back(w);
        sum += w;
      }
      if (at.exclude_outside && sum != 0)
        for (auto& w : t.weight) w /= sum;
    }
  }
  return taps;
}

// The taps of axis a, of `in` positions before resizing. An empty axis has nothing to sample from.
std::vector<Tap> axis_taps(const KernelCtx& c, const ops::ResizeAttrs& at, const ops::ResizeAttrs::Geometry& g,
                           int64_t a, int64_t in) {
  int64_t out = g.out[size_t(a)];
  if (in == 0 && out > 0)
    c.fail("axis " + std::to_string(a) + " is empty and cannot be resized to " + std::to_string(out));
  return make_taps(at, in, out, g.scale[size_t(a)], g.roi_start[size_t(a)], g.roi_end[size_t(a)]);
}

// Resampling one axis at a time goes through the stages prod(in[:a]) * prod(out[a:]) (the forward from a = rank down
// to 0, the gradient from 0 up), in double: two scratch buffers of the largest stage, used in turn.
template <typename D>
D largest_stage(const std::vector<D>& in, const std::vector<D>& out, D (*max)(const D&, const D&)) {
  D best = D(0);
  for (size_t a = 0; a <= in.size(); ++a) {
    D n = D(1);
    for (size_t i = 0; i < in.size(); ++i) n = n * (i < a ? in[i] : out[i]);
    best = max(best, n);
  }
  return best;
}

// The two stage buffers, each of the largest stage, in the kernel's scratch.
std::pair<double*, double*> stage_buffers(const KernelCtx& c, const std::vector<int64_t>& in,
                                          const std::vector<int64_t>& out) {
  size_t n = size_t(largest_stage<int64_t>(in, out, [](const int64_t& a, const int64_t& b) { return std::max(a, b); }));
  return {c.scratch_as<double>(0, n), c.scratch_as<double>(n * sizeof(double), n)};
}

void resize(const ops::ResizeAttrs& at, KernelCtx& c) {
  const Tensor& X = c.in(0);
  auto geometry = at.geometry(*c.shapes, X.dims());
  if (!geometry) c.fail("neither scales nor sizes give the output's size");
  const auto& g = *geometry;
  dispatch<kWideNumeric>(X.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto [cur, next] = stage_buffers(c, X.dims(), g.out);
    const T* xp = X.data<T>();
    for (int64_t i = 0; i < X.numel(); ++i) cur[i] = double(xp[i]);
    std::vector<int64_t> dims = X.dims();
    for (int64_t a = X.rank() - 1; a >= 0; --a) {
      if (at.unchanged(g, a, dims[size_t(a)])) continue;
      auto taps = axis_taps(c, at, g, a, dims[size_t(a)]);
      ops::AxisView v = ops::axis_view(dims, a);
      int64_t no = g.out[size_t(a)];
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t j = 0; j < no; ++j) {
          const Tap& t = taps[size_t(j)];
          for (int64_t i = 0; i < v.inner; ++i) {
            double acc = 0;
            if (t.extrapolate)
              acc = at.extrapolation;
            else
              for (size_t k = 0; k < t.index.size(); ++k)
                acc += t.weight[k] * cur[(o * v.n + t.index[k]) * v.inner + i];
            next[(o * no + j) * v.inner + i] = acc;
          }
        }
      std::swap(cur, next);
      dims[size_t(a)] = no;
    }
    T* y = c.out(0).data<T>();
    for (int64_t i = 0; i < c.out(0).numel(); ++i)
      y[i] = from_double<T>(std::is_integral_v<T> ? std::nearbyint(double(cur[i])) : double(cur[i]));
  });
}

void resize_grad(const ops::ResizeAttrs& at, KernelCtx& c) {
  const Tensor& dY = c.in(4);
  std::vector<int64_t> in = c.in(0).to_int64();
  auto geometry = at.geometry(*c.shapes, in);
  if (!geometry) c.fail("neither scales nor sizes give the output's size");
  const auto& g = *geometry;
  if (g.out != dY.dims()) c.fail("dY " + dims_str(dY.dims()) + " is not of the resized shape " + dims_str(g.out));
  dispatch<kWideFloats>(dY.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = dY.data<T>();
    auto [cur, next] = stage_buffers(c, in, g.out);
    std::copy(dy, dy + dY.numel(), cur);
    std::vector<int64_t> dims = g.out;
    for (int64_t a = 0; a < int64_t(in.size()); ++a) {  // the forward's last axis resampled first
      if (at.unchanged(g, a, in[size_t(a)])) continue;
      auto taps = axis_taps(c, at, g, a, in[size_t(a)]);
      ops::AxisView v = ops::axis_view(dims, a);
      int64_t ni = in[size_t(a)];
      std::fill(next, next + v.outer * ni * v.inner, 0.0);
      for (int64_t o = 0; o < v.outer; ++o)
        for (int64_t j = 0; j < v.n; ++j) {
          const Tap& t = taps[size_t(j)];
          if (t.extrapolate) continue;  // a constant: no gradient
          for (size_t k = 0; k < t.index.size(); ++k)
            for (int64_t i = 0; i < v.inner; ++i)
              next[(o * ni + t.index[k]) * v.inner + i] += t.weight[k] * cur[(o * v.n + j) * v.inner + i];
        }
      std::swap(cur, next);
      dims[size_t(a)] = ni;
    }
    T* dx = c.out(0).data<T>();
    for (int64_t i = 0; i < c.out(0).numel(); ++i) dx[i] = T(cur[i]);
  });
}

Dim resize_scratch(const ops::InferCtx& s, const Shape& in, const Shape& out) {
  if (in.size() != out.size()) s.fail("input " + shape_str(in) + " and output " + shape_str(out) + " differ in rank");
  return Dim(2 * int64_t(sizeof(double))) *
         largest_stage<Dim>(in, out, [](const Dim& a, const Dim& b) { return Dim::max(a, b); });
}

Dim forward_scratch(const ops::Op&, ops::InferCtx& s) { return resize_scratch(s, s.shape(0), s.outputs()[0].shape); }

const bool kRegistered =
    register_kernels(kCpu, {
                               in_float32({"", "Resize", kernel(resize), forward_scratch}),
                               in_float32({"", "Upsample", kernel(resize), forward_scratch}),
                               in_float32({"com.onnxtrain", "ResizeGrad", kernel(resize_grad),
                                           [](const ops::Op&, ops::InferCtx& s) {
                                             const std::vector<Dim>* x = s.value(0);
                                             if (!x) s.fail("the shape of X is not known");
                                             return resize_scratch(s, Shape(x->begin(), x->end()), s.shape(4));
                                           }}),
                           });

}  // namespace
}  // namespace onnxtrain::kernels
