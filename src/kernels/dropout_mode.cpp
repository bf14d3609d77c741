#include "kernels/dropout_mode.h"

#include <string>

#include "kernels/counter_random.h"

namespace onnxtrain::kernels {

std::optional<float> dropout_training_ratio(const ops::DropoutAttrs& a, const KernelCtx& c) {
  if (a.legacy || !c.has(2) || c.in(2).to_int64()[0] == 0) return std::nullopt;
  float ratio = c.has(1) ? float(c.in(1).to_double()[0]) : 0.5f;
  if (ratio < 0 || ratio >= 1) c.fail("ratio " + std::to_string(ratio) + " must be in [0, 1)");
  return ratio;
}

DropoutCall dropout_call(const ops::DropoutAttrs& a, const KernelCtx& c, const Tensor* residual) {
  if (residual && residual->numel() != c.in(0).numel()) c.fail("the residual is not shaped as the output");
  const std::optional<float> ratio = dropout_training_ratio(a, c);
  const uint64_t seed = a.has_seed ? uint64_t(a.seed) : c.seed;
  if (!ratio || *ratio <= 0) return {false, seed, 0, 1.0};
  return {true, seed, dropout_threshold(*ratio), 1.0 / (1.0 - double(*ratio))};
}

}  // namespace onnxtrain::kernels
