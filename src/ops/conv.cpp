// Conv (N-d, groups, dilations, strides, pads/auto_pad) as im2col + GEMM.
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "ops/op.h"
#include "ops/window.h"

namespace onnxtrain::ops {
namespace {

class ConvOp : public Op {
 public:
  explicit ConvOp(const ir::Node& n) : node_(n), group_(n.attr_int("group", 1)) {}

  Window window(const Shape& w_shape) const {
    std::vector<int64_t> k;
    for (size_t i = 2; i < w_shape.size(); ++i) k.push_back(w_shape[i].is_const() ? w_shape[i].value() : 1);
    return Window::from_node(node_, node_.has_attr("kernel_shape") ? node_.attr_ints("kernel_shape") : k);
  }
  void infer(InferCtx& ctx) const override {
    const Shape &x = ctx.shape(0), &w = ctx.shape(1);
    if (x.size() < 3 || w.size() != x.size())
      ctx.fail("X " + shape_str(x) + " and W " + shape_str(w) + " must be (N, C, ...) and (M, C/group, ...)");
    Dim cin = w[1] * Dim(group_);
    if (x[1].is_const() && cin.is_const() && x[1] != cin)
      ctx.fail("X has " + x[1].str() + " channels, W expects " + cin.str() + " (group " + std::to_string(group_) + ")");
    Window win = window(w);
    Shape out = {x[0], w[0]};
    auto sp = win.out_sizes(Shape(x.begin() + 2, x.end()));
    out.insert(out.end(), sp.begin(), sp.end());
    ctx.set(0, ctx.dtype(0), out);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &X = c.in(0), &W = c.in(1);
    Window win = window(const_shape(W.dims()));
    size_t nd = win.kernel.size();
    std::vector<int64_t> in_sp(X.dims().begin() + 2, X.dims().end()), out_sp(c.out(0).dims().begin() + 2, c.out(0).dims().end());
    auto pads = win.resolved_pads(in_sp);
    int64_t N = X.dims()[0], C = X.dims()[1], M = W.dims()[0], G = group_;
    int64_t cg = C / G, mg = M / G;
    int64_t ksize = numel_of(win.kernel), in_size = numel_of(in_sp), out_size = numel_of(out_sp);
    int64_t rows = cg * ksize;  // im2col: (C/G * K, out_size)
    kernels::dispatch<kernels::kFloats>(X.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<T> cols(size_t(rows * out_size));
      T* Y = c.out(0).data<T>();
      const T* B = c.has(2) ? c.in(2).data<T>() : nullptr;
      std::vector<int64_t> kidx(nd), oidx(nd);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < G; ++g) {
          const T* xg = X.data<T>() + (n * C + g * cg) * in_size;
          for (int64_t r = 0; r < rows; ++r) {
            int64_t ch = r / ksize, kr = r % ksize;
            for (int64_t d = int64_t(nd) - 1; d >= 0; --d) {
              kidx[size_t(d)] = kr % win.kernel[size_t(d)];
              kr /= win.kernel[size_t(d)];
            }
            T* dst = cols.data() + r * out_size;
            for (int64_t o = 0; o < out_size; ++o) {
              int64_t orem = o, off = 0;
              bool inside = true;
              for (int64_t d = int64_t(nd) - 1; d >= 0; --d) {
                int64_t od = orem % out_sp[size_t(d)];
                orem /= out_sp[size_t(d)];
                int64_t pos = od * win.strides[size_t(d)] - pads[size_t(d)] + kidx[size_t(d)] * win.dilations[size_t(d)];
                if (pos < 0 || pos >= in_sp[size_t(d)]) inside = false;
                oidx[size_t(d)] = pos;
              }
              if (inside)
                for (size_t d = 0; d < nd; ++d) off = off * in_sp[d] + oidx[d];
              dst[o] = inside ? xg[ch * in_size + off] : T(0);
            }
          }
          T* yg = Y + (n * M + g * mg) * out_size;
          kernels::gemm<T>(false, false, mg, out_size, rows, T(1), W.data<T>() + g * mg * rows, rows, cols.data(),
                           out_size, T(0), yg, out_size);
          if (B)
            for (int64_t m = 0; m < mg; ++m)
              for (int64_t o = 0; o < out_size; ++o) yg[m * out_size + o] += B[g * mg + m];
        }
    });
  }

 private:
  const ir::Node& node_;
  int64_t group_;
};
OT_REGISTER_OP("Conv", ConvOp);

}  // namespace
}  // namespace onnxtrain::ops
