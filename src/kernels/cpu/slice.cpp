// Slice, and its gradient com.onnxtrain.SliceGrad: the same strided window of the data, read or written.
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel.h"
#include "ops/layout.h"

namespace onnxtrain::kernels {
namespace {

// Where the window of a Slice of data of `dims` starts, and its element strides.
struct Window {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

Window window(const ops::SliceAttrs& at, KernelCtx& c, const std::vector<int64_t>& dims, size_t first) {
  ops::SliceAttrs::Plan p = at.plan(*c.shapes, const_shape(dims), first);
  auto st = contiguous_strides(dims);
  Window w;
  for (size_t i = 0; i < st.size(); ++i) {
    w.offset += p.start[i].value() * st[i];
    w.strides.push_back(st[i] * p.step[i]);
  }
  return w;
}

void slice(const ops::SliceAttrs& at, KernelCtx& c) {
  Window w = window(at, c, c.in(0).dims(), 1);
  dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_copy(c.out(0).data<T>(), c.in(0).data<T>() + w.offset, c.out(0).dims(), w.strides);
  });
}

void slice_grad(const ops::SliceAttrs& at, KernelCtx& c) {
  Window w = window(at, c, c.out(0).dims(), 2);
  std::memset(c.out(0).raw(), 0, c.out(0).nbytes());
  dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_copy<true>(c.out(0).data<T>() + w.offset, c.in(0).data<T>(), c.in(0).dims(), w.strides);
  });
}

const bool kRegistered = register_kernels(kCpu, {
                                                    {"", "Slice", kernel(slice)},
                                                    {"com.onnxtrain", "SliceGrad", kernel(slice_grad)},
                                                });

}  // namespace
}  // namespace onnxtrain::kernels
