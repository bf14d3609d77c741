// com.onnxtrain.RotaryEmbedding (ops/rotary_embedding.cpp) on the CPU: a row of X's last dim at a time, cos and sin
// read where they broadcast to it; bfloat16 and float16 computed in float32 and rounded once, X and Y of 16 bits
// with float32 cos and sin too (autocast's casts folded in).
#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"
#include "kernels/strides.h"

namespace onnxtrain::kernels {
namespace {

// Y (TY) from X (TX), cos and sin (TC), in TC's accumulation type.
template <typename TX, typename TC, typename TY>
void rotate(const TX* xp, const TC* cp, const TC* sp, TY* y, int64_t rows, int64_t width, bool transposed,
            const std::vector<int64_t>& leading, const std::vector<int64_t>& cs, const std::vector<int64_t>& ss) {
  using A = acc_t<TC>;
  const int64_t half = width / 2;
  parallel_for(rows, width * 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto [co, so] = broadcast_offsets<2>(r, leading, {&cs, &ss});
      const TX* xr = xp + r * width;
      const TC *c1 = cp + co, *s1 = sp + so;
      TY* yr = y + r * width;
      for (int64_t j = 0; j < half; ++j) {
        const A a = A(xr[j]), b = A(xr[half + j]);
        const A ca = A(c1[j]), cb = A(c1[half + j]), sa = A(s1[j]), sb = A(s1[half + j]);
        yr[j] = TY(transposed ? a * ca + b * sb : a * ca - b * sa);
        yr[half + j] = TY(transposed ? b * cb - a * sa : b * cb + a * sb);
      }
    }
  });
}

void rotary_embedding(KernelCtx& c) {
  const Tensor &x = c.in(0), &cos = c.in(1), &sin = c.in(2);
  Tensor& out = c.out(0);
  const bool transposed = c.node.attr_int("transposed", 0) != 0;
  const std::vector<int64_t>& dims = x.dims();
  const int64_t width = dims.back(), rows = width ? x.numel() / width : 0;
  const bool mixed = x.dtype() != cos.dtype() || out.dtype() != cos.dtype();
  for (const Tensor* t : {&cos, &sin}) {
    std::vector<int64_t> bdims;
    if (t->dtype() != cos.dtype() || t->dims().empty() || t->dims().back() != width ||
        !broadcast_dims(t->dims(), dims, &bdims) || bdims != dims || width % 2 ||
        (mixed && cos.dtype() != DType::kFloat32))
      c.fail("cos and sin " + dims_str(cos.dims()) + ", " + dims_str(sin.dims()) + " must broadcast to X " +
             dims_str(dims) + " (of even last dim) with its last dim, in X's dtype or float32");
  }
  const std::vector<int64_t> leading(dims.begin(), dims.end() - 1);
  std::vector<int64_t> cs = broadcast_strides(cos.dims(), dims), ss = broadcast_strides(sin.dims(), dims);
  cs.pop_back();
  ss.pop_back();
  dispatch<kFloats>(cos.dtype(), c.node.where(), [&](auto ctag) {
    using TC = typename decltype(ctag)::type;
    const TC *cp = cos.data<TC>(), *sp = sin.data<TC>();
    if constexpr (std::is_same_v<TC, float>) {  // X and Y of 16 bits or float32 (autocast's, folded in)
      dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto xtag) {
        using TX = typename decltype(xtag)::type;
        dispatch<kFloats>(out.dtype(), c.node.where(), [&](auto ytag) {
          using TY = typename decltype(ytag)::type;
          rotate(x.data<TX>(), cp, sp, out.data<TY>(), rows, width, transposed, leading, cs, ss);
        });
      });
    } else {
      rotate(x.data<TC>(), cp, sp, out.data<TC>(), rows, width, transposed, leading, cs, ss);
    }
  });
}

const bool kRegistered = register_kernels(kCpu, {{"com.onnxtrain", "RotaryEmbedding", kernel(rotary_embedding)}});

}  // namespace
}  // namespace onnxtrain::kernels
