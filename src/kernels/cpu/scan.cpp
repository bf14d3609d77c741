// Ops that scan or sort along one axis: CumSum and TopK.
#include "ops/scan.h"

#include <algorithm>
#include <numeric>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/kernel.h"
#include "ops/axis_util.h"

namespace onnxtrain::kernels {
namespace {

void cum_sum(const ops::CumSumAttrs& at, KernelCtx& c) {
  const Tensor& x0 = c.in(0);
  // A bool input counts its true values (as int64, in scratch).
  Tensor counted;
  if (x0.dtype() == DType::kBool) {
    int64_t* n = c.scratch_as<int64_t>(0, size_t(x0.numel()));
    for (int64_t i = 0; i < x0.numel(); ++i) n[i] = x0.data<bool>()[i];
    counted = Tensor(DType::kInt64, x0.dims(), Storage::borrow(n, c.scratch_bytes, nullptr));
  }
  const Tensor& x = counted.defined() ? counted : x0;
  int64_t a = c.in(1).to_int64()[0];
  if (a < -x.rank() || a >= x.rank()) c.fail("axis " + std::to_string(a) + " out of range for " + dims_str(x.dims()));
  ops::AxisView v = ops::axis_view(x.dims(), a < 0 ? a + x.rank() : a);
  dispatch<kWideNumeric>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = c.out(0).data<T>();
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t i = 0; i < v.inner; ++i) {
        T acc = 0;
        for (int64_t k0 = 0; k0 < v.n; ++k0) {
          int64_t k = at.reverse ? v.n - 1 - k0 : k0;
          int64_t idx = (o * v.n + k) * v.inner + i;
          if (at.exclusive) {
            out[idx] = acc;
            acc += in[idx];
          } else {
            acc += in[idx];
            out[idx] = acc;
          }
        }
      }
  });
}

void top_k(const ops::TopKAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  int64_t a = at.axis < 0 ? at.axis + x.rank() : at.axis;
  ops::AxisView v = ops::axis_view(x.dims(), a);
  int64_t k = c.out(0).dims()[size_t(a)];
  dispatch<kWideNumeric>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* vals = c.out(0).data<T>();
    int64_t* idx = c.wants(1) ? c.out(1).data<int64_t>() : nullptr;
    std::vector<int64_t> order(size_t(v.n));
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t i = 0; i < v.inner; ++i) {
        auto value = [&](int64_t j) { return in[(o * v.n + j) * v.inner + i]; };
        std::iota(order.begin(), order.end(), 0);
        // Ties keep the lower index first, as the ONNX reference does.
        auto cmp = [&](int64_t p, int64_t q) {
          if (value(p) != value(q)) return at.largest ? value(p) > value(q) : value(p) < value(q);
          return p < q;
        };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
        for (int64_t j = 0; j < k; ++j) {
          int64_t dst = (o * k + j) * v.inner + i;
          vals[dst] = value(order[size_t(j)]);
          if (idx) idx[dst] = order[size_t(j)];
        }
      }
  });
}

const bool kRegistered = register_kernels(
    kCpu, {
              in_float32({"", "CumSum", kernel(cum_sum),
                          [](const ops::Op&, ops::InferCtx& s) {
                            return s.dtype(0) == DType::kBool ? shape_numel(s.shape(0)) * Dim(int64_t(sizeof(int64_t)))
                                                              : Dim(0);
                          }}),
              in_float32({"", "TopK", kernel(top_k)}),
          });

}  // namespace
}  // namespace onnxtrain::kernels
