// Typed attributes of LayerNormalization, BatchNormalization and InstanceNormalization, read by their kernels.
#pragma once
#include <cstdint>

#include "ir/graph.h"
#include "onnxtrain/dtype.h"

namespace onnxtrain::ops {

struct NormAttrs {
  int64_t axis;  // LayerNormalization: the first normalized axis
  float epsilon;
  float momentum;  // BatchNormalization's running statistics
  bool training;   // BatchNormalization: batch statistics, running ones updated
  bool unbiased;   // onnxtrain's unbiased_running_var: PyTorch's update of running_var
  int64_t to = 0;  // com.onnxtrain's LayerNormalization and RMSNormalization: Y's dtype (0: X's)
};

class InferCtx;
// Whether a LayerNormalization of X over the dims from `axis` on with scale W differentiates through the fused
// LayerNormalizationGrad: W of X's dtype, shaped as the normalized dims (else its gradient is composed of ops).
bool layer_norm_fused_grad(const ir::Value* x, const ir::Value* w, int64_t axis);
// The norms' Y dtype: X's, or attribute `to` where given, which must be X's or 16 bits beside a float32 X (else a
// ShapeError naming the node).
DType norm_output_dtype(const NormAttrs& a, InferCtx& ctx);
// The norm gradients' input `base` (added to dX), where given: of X's (input 1) dtype and shape, else a ShapeError.
void check_grad_base(InferCtx& ctx, size_t base);

}  // namespace onnxtrain::ops
