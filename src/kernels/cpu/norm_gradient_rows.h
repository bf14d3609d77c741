// The pass over rows shared by the host's LayerNormalizationGrad and RMSNormalizationGrad: each row's dX and the
// column sums (dscale, dbias) in one pass, reading dY as it is stored (float32, float64, or the bfloat16 dY that
// autocast feeds a float32 norm). Column sums are taken over fixed blocks of rows (partial sums in the compute
// type, each block's rows in order), then over the blocks in double, in their order: the same at any thread count.
#pragma once
#include <cstdint>

#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels::norm_gradient {

constexpr int64_t kBlockRows = 32;

// T: the compute type of x, the scale, the statistics, base and the outputs; D: dY's (T, or BFloat16 with float).
template <typename T, typename D>
struct Rows {
  int64_t rows = 0, n = 0;
  const D* dy = nullptr;
  const T *x = nullptr, *scale = nullptr, *rstd = nullptr;
  const T* mean = nullptr;  // per row; none: RMSNorm's rows (not centred, no dbias)
  const T* base = nullptr;  // added to dX where given, as an Add after it would
  T* dx = nullptr;          // outputs, each where wanted
  T *dscale = nullptr, *dbias = nullptr;
};

// The partial column sums `run` needs (elements of the compute type) for rows of n elements, and the scratch a norm
// gradient declares for them (x input 1, the scale input 2).
inline int64_t partials(int64_t rows, int64_t n) { return (rows + kBlockRows - 1) / kBlockRows * 2 * n; }
Dim scratch(const ops::Op& op, ops::InferCtx& s);

// The nodes the norm gradients take as they are (in_float32): a bfloat16 dY with every other value float32.
bool takes_as_is(ops::InferCtx& s);

// Calls run(Tag<T>(), Tag<D>()) for dY's and x's dtypes, which must be alike or bfloat16 and float32.
template <typename F>
void dispatch(DType dy, DType x, const KernelCtx& c, F run) {
  if (dy == DType::kBFloat16 && x == DType::kFloat32) return run(Tag<float>(), Tag<BFloat16>());
  if (dy != x) c.fail("dY is " + dtype_name(dy) + " and x " + dtype_name(x) + ": they must be alike");
  if (x == DType::kFloat32) return run(Tag<float>(), Tag<float>());
  if (x == DType::kFloat64) return run(Tag<double>(), Tag<double>());
  c.fail("the norm gradients compute in float32 or float64, not " + dtype_name(x));
}

// Per row, with g = dY scale and xhat = (x - mean) rstd (x rstd for RMSNorm): dX = rstd (g - mean(g) - xhat
// mean(g xhat)) (without mean(g) for RMSNorm), plus base; dscale = sum over rows of dY xhat, dbias = sum of dY.
template <typename T, typename D>
void run(const Rows<T, D>& r, T* partials);

}  // namespace onnxtrain::kernels::norm_gradient
