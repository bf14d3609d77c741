// Conv (N-d, groups, dilations, strides, pads/auto_pad) as im2col + GEMM, and its gradient
// com.onnxtrain.ConvGrad (dX by col2im, dW by GEMM, dB by sums).
#include "ops/conv.h"

#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

using ops::Window;

// The geometry of one convolution call, concrete.
struct ConvGeometry {
  Window win;
  std::vector<int64_t> in_sp, out_sp, pads;
  int64_t n, c, m, groups, cg, mg, ksize, in_size, out_size, rows;  // rows = cg * ksize
};

ConvGeometry geometry(const Window& w, const std::vector<int64_t>& x_dims, const std::vector<int64_t>& w_dims,
                      int64_t groups) {
  ConvGeometry g;
  g.win = w;
  g.in_sp.assign(x_dims.begin() + 2, x_dims.end());
  g.pads = w.resolved_pads(g.in_sp);
  std::vector<Dim> in_dims(g.in_sp.begin(), g.in_sp.end());
  for (auto& d : w.out_sizes(in_dims)) g.out_sp.push_back(d.value());
  g.n = x_dims[0], g.c = x_dims[1], g.m = w_dims[0], g.groups = groups;
  g.cg = g.c / groups, g.mg = g.m / groups;
  g.ksize = numel_of(w.kernel), g.in_size = numel_of(g.in_sp), g.out_size = numel_of(g.out_sp);
  g.rows = g.cg * g.ksize;
  return g;
}

// For each (channel, kernel offset) row and output position, the input element
// it reads (-1 in the padding); shared by im2col and col2im.
template <typename Visit>
void for_each_tap(const ConvGeometry& g, Visit visit) {
  size_t nd = g.win.kernel.size();
  std::vector<int64_t> kidx(nd);
  for (int64_t r = 0; r < g.rows; ++r) {
    int64_t ch = r / g.ksize, kr = r % g.ksize;
    for (int64_t d = int64_t(nd) - 1; d >= 0; --d) {
      kidx[size_t(d)] = kr % g.win.kernel[size_t(d)];
      kr /= g.win.kernel[size_t(d)];
    }
    for (int64_t o = 0; o < g.out_size; ++o) {
      int64_t orem = o, off = 0, stride = 1;
      bool inside = true;
      for (int64_t d = int64_t(nd) - 1; d >= 0; --d) {
        int64_t od = orem % g.out_sp[size_t(d)];
        orem /= g.out_sp[size_t(d)];
        int64_t pos = od * g.win.strides[size_t(d)] - g.pads[size_t(d)] + kidx[size_t(d)] * g.win.dilations[size_t(d)];
        inside = inside && pos >= 0 && pos < g.in_sp[size_t(d)];
        off += pos * stride;
        stride *= g.in_sp[size_t(d)];
      }
      visit(r, o, inside ? ch * g.in_size + off : -1);
    }
  }
}

template <typename T>
void im2col(const ConvGeometry& g, const T* x, T* cols) {  // cols: (rows, out_size)
  for_each_tap(g, [&](int64_t r, int64_t o, int64_t src) { cols[r * g.out_size + o] = src < 0 ? T(0) : x[src]; });
}

template <typename T>
void col2im(const ConvGeometry& g, const T* cols, T* dx) {  // dx (C/G, in_size) += cols
  for_each_tap(g, [&](int64_t r, int64_t o, int64_t dst) {
    if (dst >= 0) dx[dst] += cols[r * g.out_size + o];
  });
}

void conv(const ops::ConvAttrs& at, KernelCtx& c) {
  const Tensor &X = c.in(0), &W = c.in(1);
  ConvGeometry g = geometry(at.window(W.dims()), X.dims(), W.dims(), at.group);
  dispatch<kWideFloats>(X.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* cols = c.scratch_as<T>(0, size_t(g.rows * g.out_size));  // (C/G * K, out_size)
    T* Y = c.out(0).data<T>();
    const T* B = c.has(2) ? c.in(2).data<T>() : nullptr;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        im2col(g, X.data<T>() + (n * g.c + grp * g.cg) * g.in_size, cols);
        T* yg = Y + (n * g.m + grp * g.mg) * g.out_size;
        gemm<T>(false, false, g.mg, g.out_size, g.rows, T(1), W.data<T>() + grp * g.mg * g.rows, g.rows, cols,
                g.out_size, T(0), yg, g.out_size);
        if (B)
          for (int64_t m = 0; m < g.mg; ++m)
            for (int64_t o = 0; o < g.out_size; ++o) yg[m * g.out_size + o] += B[grp * g.mg + m];
      }
  });
}

void conv_grad(const ops::ConvAttrs& at, KernelCtx& c) {
  const Tensor &dY = c.in(0), &X = c.in(1), &W = c.in(2);
  ConvGeometry g = geometry(at.window(W.dims()), X.dims(), W.dims(), at.group);
  dispatch<kWideFloats>(X.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* cols = c.scratch_as<T>(0, size_t(g.rows * g.out_size));  // (C/G * K, out_size)
    T* dX = c.wants(0) ? c.out(0).data<T>() : nullptr;
    T* dW = c.wants(1) ? c.out(1).data<T>() : nullptr;
    T* dB = c.wants(2) ? c.out(2).data<T>() : nullptr;
    if (dX) std::memset(dX, 0, c.out(0).nbytes());
    if (dW) std::memset(dW, 0, c.out(1).nbytes());
    if (dB) std::memset(dB, 0, c.out(2).nbytes());
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const T* dyg = dY.data<T>() + (n * g.m + grp * g.mg) * g.out_size;  // (M/G, out_size)
        const T* wg = W.data<T>() + grp * g.mg * g.rows;                    // (M/G, rows)
        if (dW) {                                                           // dW += dY cols^T
          im2col(g, X.data<T>() + (n * g.c + grp * g.cg) * g.in_size, cols);
          gemm<T>(false, true, g.mg, g.rows, g.out_size, T(1), dyg, g.out_size, cols, g.out_size, T(1),
                  dW + grp * g.mg * g.rows, g.rows);
        }
        if (dX) {  // cols = W^T dY, scattered back onto the input
          gemm<T>(true, false, g.rows, g.out_size, g.mg, T(1), wg, g.rows, dyg, g.out_size, T(0), cols, g.out_size);
          col2im(g, cols, dX + (n * g.c + grp * g.cg) * g.in_size);
        }
        if (dB)
          for (int64_t m = 0; m < g.mg; ++m)
            for (int64_t o = 0; o < g.out_size; ++o) dB[grp * g.mg + m] += dyg[m * g.out_size + o];
      }
  });
}

// The im2col buffer, (C/G * K, out_size): from W (M, C/G, k...) and the spatial dims of the output (Conv) or of
// dY (ConvGrad, input 0).
Dim cols_bytes(const ops::InferCtx& shapes, size_t w, const Shape& out) {
  const Shape& ws = shapes.shape(w);
  Dim n = shape_numel(Shape(ws.begin() + 1, ws.end())) * shape_numel(Shape(out.begin() + 2, out.end()));
  return n * Dim(int64_t(dtype_size(shapes.dtype(0))));
}

const bool kRegistered = register_kernels(
    kCpu, {
              in_float32({"", "Conv", kernel(conv),
                          [](const ops::Op&, ops::InferCtx& s) { return cols_bytes(s, 1, s.outputs()[0].shape); }}),
              in_float32({"com.onnxtrain", "ConvGrad", kernel(conv_grad),
                          [](const ops::Op&, ops::InferCtx& s) { return cols_bytes(s, 2, s.shape(0)); }}),
          });

}  // namespace
}  // namespace onnxtrain::kernels
