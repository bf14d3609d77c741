// Softmax, LogSoftmax and Hardmax along one axis (opset 13), or over the trailing dims flattened at it (before).
#include "ops/softmax.h"

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"
#include "ops/axis_util.h"

namespace onnxtrain::kernels {
namespace {

using ops::SoftmaxAttrs;

// One row in acc_t<T>; bfloat16 and float16 rows are rounded once, at the end (exp computed twice for them).
template <typename T>
void softmax_row(SoftmaxAttrs::Kind kind, const T* x, T* y, int64_t n, int64_t stride) {
  using A = acc_t<T>;
  if constexpr (std::is_same_v<T, float>) {
    if (kind == SoftmaxAttrs::kSoftmax && stride == 1) return softmax_f32(x, y, n);  // contiguous rows: vectorised
  }
  A m = -INFINITY;
  int64_t arg = 0;
  for (int64_t k = 0; k < n; ++k)
    if (A(x[k * stride]) > m) m = A(x[k * stride]), arg = k;
  if (kind == SoftmaxAttrs::kHardmax) {
    for (int64_t k = 0; k < n; ++k) y[k * stride] = T(k == arg);
    return;
  }
  A sum = 0;
  if (kind == SoftmaxAttrs::kSoftmax) {
    if constexpr (kLowFloat<T>) {
      for (int64_t k = 0; k < n; ++k) sum += std::exp(A(x[k * stride]) - m);
      A inv = A(1) / sum;
      for (int64_t k = 0; k < n; ++k) y[k * stride] = T(std::exp(A(x[k * stride]) - m) * inv);
    } else {
      for (int64_t k = 0; k < n; ++k) sum += (y[k * stride] = std::exp(x[k * stride] - m));
      A inv = A(1) / sum;
      for (int64_t k = 0; k < n; ++k) y[k * stride] *= inv;
    }
  } else {
    for (int64_t k = 0; k < n; ++k) sum += std::exp(A(x[k * stride]) - m);
    A lse = m + std::log(sum);
    for (int64_t k = 0; k < n; ++k) y[k * stride] = T(A(x[k * stride]) - lse);
  }
}

void softmax(const SoftmaxAttrs& a, KernelCtx& c) {
  const Tensor& x = c.in(0);
  int64_t axis = a.axis < 0 ? a.axis + x.rank() : a.axis;
  ops::AxisView v = a.flatten ? ops::flatten_view(x.dims(), axis) : ops::axis_view(x.dims(), axis);
  dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = c.out(0).data<T>();
    parallel_for(v.outer * v.inner, v.n * 8, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t o = r / v.inner, i = r % v.inner;
        softmax_row(a.kind, in + o * v.n * v.inner + i, out + o * v.n * v.inner + i, v.n, v.inner);
      }
    });
  });
}

const bool kRegistered = register_kernels(
    kCpu, {{"", "Softmax", kernel(softmax)}, {"", "LogSoftmax", kernel(softmax)}, {"", "Hardmax", kernel(softmax)}});

}  // namespace
}  // namespace onnxtrain::kernels
