// com.onnxtrain.RotaryEmbedding (ops/rotary_embedding.cpp) on the CPU: a row of X's last dim at a time, cos and sin
// read where they broadcast to it; bfloat16 and float16 computed in float32 and rounded once.
#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"
#include "kernels/strides.h"

namespace onnxtrain::kernels {
namespace {

void rotary_embedding(KernelCtx& c) {
  const Tensor &x = c.in(0), &cos = c.in(1), &sin = c.in(2);
  const bool transposed = c.node.attr_int("transposed", 0) != 0;
  const std::vector<int64_t>& dims = x.dims();
  const int64_t width = dims.back(), half = width / 2, rows = width ? x.numel() / width : 0;
  for (const Tensor* t : {&cos, &sin}) {
    std::vector<int64_t> out;
    if (t->dtype() != x.dtype() || t->dims().empty() || t->dims().back() != width ||
        !broadcast_dims(t->dims(), dims, &out) || out != dims || width % 2)
      c.fail("cos and sin " + dims_str(cos.dims()) + ", " + dims_str(sin.dims()) + " must broadcast to X " +
             dims_str(dims) + " (of even last dim) with its last dim, in its dtype");
  }
  const std::vector<int64_t> leading(dims.begin(), dims.end() - 1);
  std::vector<int64_t> cs = broadcast_strides(cos.dims(), dims), ss = broadcast_strides(sin.dims(), dims);
  cs.pop_back();
  ss.pop_back();
  dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T *xp = x.data<T>(), *cp = cos.data<T>(), *sp = sin.data<T>();
    T* y = c.out(0).data<T>();
    parallel_for(rows, width * 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const auto [co, so] = broadcast_offsets<2>(r, leading, {&cs, &ss});
        const T *xr = xp + r * width, *c1 = cp + co, *s1 = sp + so;
        T* yr = y + r * width;
        for (int64_t j = 0; j < half; ++j) {
          const A a = A(xr[j]), b = A(xr[half + j]);
          const A ca = A(c1[j]), cb = A(c1[half + j]), sa = A(s1[j]), sb = A(s1[half + j]);
          yr[j] = T(transposed ? a * ca + b * sb : a * ca - b * sa);
          yr[half + j] = T(transposed ? b * cb - a * sa : b * cb + a * sb);
        }
      }
    });
  });
}

const bool kRegistered = register_kernels(kCpu, {{"com.onnxtrain", "RotaryEmbedding", kernel(rotary_embedding)}});

}  // namespace
}  // namespace onnxtrain::kernels
