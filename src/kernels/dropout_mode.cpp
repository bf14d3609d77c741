#include "kernels/dropout_mode.h"

#include <string>

namespace onnxtrain::kernels {

std::optional<float> dropout_training_ratio(const ops::DropoutAttrs& a, const KernelCtx& c) {
  if (a.legacy || !c.has(2) || c.in(2).to_int64()[0] == 0) return std::nullopt;
  float ratio = c.has(1) ? float(c.in(1).to_double()[0]) : 0.5f;
  if (ratio < 0 || ratio >= 1) c.fail("ratio " + std::to_string(ratio) + " must be in [0, 1)");
  return ratio;
}

}  // namespace onnxtrain::kernels
