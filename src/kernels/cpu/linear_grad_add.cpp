// com.onnxtrain.LinearGradAdd (ops/linear_cross_entropy.cpp) on the CPU: the gradient of a head's product, from the
// gradient of its scores, added to a base (in place where the plan put the output in the base's buffer), in float32
// and float64, and in bfloat16 through bf16 GEMMs accumulating in float32 where the CPU has bf16 dot products
// (elsewhere through float32 copies). Without dY (the caller made no gradient for the scores) the output is the base.
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/kernel.h"
#include "ops/loss.h"

namespace onnxtrain::kernels {
namespace {

using ops::LinearGradAddAttrs;

// The sizes of one call: dY (n, c) as rows, X (n, k), W (c, k).
struct Sizes {
  int64_t n, k, c;
};

// out (c) += the rows of dy (n, c) summed, in float32 for bfloat16.
template <typename T>
void add_row_sums(const Sizes& s, const T* dy, T* out) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  parallel_for(s.c, s.n * 4, [&](int64_t j0, int64_t j1) {
    std::vector<Acc> sums(size_t(j1 - j0), Acc(0));
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = j0; j < j1; ++j) sums[size_t(j - j0)] += Acc(dy[i * s.c + j]);
    for (int64_t j = j0; j < j1; ++j) out[j] = T(Acc(out[j]) + sums[size_t(j - j0)]);
  });
}

template <typename T>
void add_product(LinearGradAddAttrs::Wrt wrt, const Sizes& s, const T* dy, const T* x, const T* w, T* out) {
  if (wrt == LinearGradAddAttrs::kX) gemm<T>(false, false, s.n, s.k, s.c, T(1), dy, s.c, w, s.k, T(1), out, s.k);
  if (wrt == LinearGradAddAttrs::kW) gemm<T>(true, false, s.c, s.k, s.n, T(1), dy, s.c, x, s.k, T(1), out, s.k);
  if (wrt == LinearGradAddAttrs::kB) add_row_sums(s, dy, out);
}

void add_product(LinearGradAddAttrs::Wrt wrt, const Sizes& s, const BFloat16* dy, const BFloat16* x,
                 const BFloat16* w, BFloat16* out) {
  if (wrt == LinearGradAddAttrs::kX) gemm_bf16(1, s.n, s.k, s.c, {dy, s.c}, {w, s.k}, out, 1, nullptr, true);
  if (wrt == LinearGradAddAttrs::kW)
    gemm_bf16(1, s.c, s.k, s.n, {dy, s.c, 0, true}, {x, s.k}, out, 1, nullptr, true);
  if (wrt == LinearGradAddAttrs::kB) add_row_sums(s, dy, out);
}

void linear_grad_add(const LinearGradAddAttrs& a, KernelCtx& c) {
  const Tensor &x = c.in(1), &w = c.in(2);
  Tensor& out = c.out(0);
  const auto& xd = x.dims();
  Sizes s{0, xd.back(), w.dims().size() == 2 ? w.dims()[0] : -1};
  s.n = s.k ? x.numel() / s.k : numel_of(std::vector<int64_t>(xd.begin(), xd.end() - 1));
  if (s.c < 0 || w.dims()[1] != s.k || (c.has(0) && c.in(0).numel() != s.n * s.c) ||
      (c.has(3) && c.in(3).numel() != out.numel()))
    c.fail("dY " + (c.has(0) ? dims_str(c.in(0).dims()) : std::string("(unset)")) + ", X " + dims_str(xd) + ", W " +
           dims_str(w.dims()) + " and the base do not fit together");
  if (!c.has(3))
    std::memset(out.raw(), 0, out.nbytes());
  else if (out.raw() != c.in(3).raw())
    std::memcpy(out.raw(), c.in(3).raw(), out.nbytes());
  if (!c.has(0) || s.n == 0) return;
  if (x.dtype() == DType::kBFloat16)
    return add_product(a.wrt, s, c.in(0).data<BFloat16>(), x.data<BFloat16>(), w.data<BFloat16>(),
                       out.data<BFloat16>());
  dispatch<kWideFloats>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_product(a.wrt, s, c.in(0).data<T>(), x.data<T>(), w.data<T>(), out.data<T>());
  });
}

const bool kRegistered = register_kernels(
    kCpu, {in_float32({"com.onnxtrain", "LinearGradAdd", kernel<LinearGradAddAttrs>(linear_grad_add)},
                      gemm_bf16_native)});

}  // namespace
}  // namespace onnxtrain::kernels
