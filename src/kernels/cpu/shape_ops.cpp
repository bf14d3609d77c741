// Shape, Size, Constant, ConstantOfShape and Range (the view ops Reshape, Flatten, Squeeze and Unsqueeze have no
// kernel: their outputs share their input's bytes).
#include "ops/shape_ops.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

void shape(const ops::ShapeAttrs& at, KernelCtx& c) {
  auto [s, e] = at.range(c.in(0).rank());
  for (int64_t i = s; i < e; ++i) c.out(0).data<int64_t>()[i - s] = c.in(0).dims()[size_t(i)];
}

void size(KernelCtx& c) { c.out(0).data<int64_t>()[0] = c.in(0).numel(); }

void constant(const ops::ValueAttrs& at, KernelCtx& c) {
  std::memcpy(c.out(0).raw(), at.value.raw(), at.value.nbytes());
}

void constant_of_shape(const ops::ValueAttrs& at, KernelCtx& c) {
  Tensor& out = c.out(0);
  const auto* v = static_cast<const unsigned char*>(at.value.raw());
  if (std::all_of(v, v + at.value.nbytes(), [](unsigned char b) { return b == 0; }))
    return std::memset(out.raw(), 0, out.nbytes()), void();  // zeros, the common case (gradients' starts)
  dispatch_bytes(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T value;
    std::memcpy(&value, v, sizeof(T));
    std::fill(out.data<T>(), out.data<T>() + out.numel(), value);
  });
}

void range(KernelCtx& c) {
  dispatch<kNumeric>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T start = c.in(0).data<T>()[0], delta = c.in(2).data<T>()[0];
    T* o = c.out(0).data<T>();
    for (int64_t i = 0; i < c.out(0).numel(); ++i) o[i] = T(start + T(i) * delta);
  });
}

const bool kRegistered = register_kernels(kCpu, {
                                                    {"", "Shape", kernel(shape)},
                                                    {"", "Size", kernel(size)},
                                                    {"", "Constant", kernel(constant)},
                                                    {"", "ConstantOfShape", kernel(constant_of_shape)},
                                                    {"", "Range", kernel(range)},
                                                });

}  // namespace
}  // namespace onnxtrain::kernels
