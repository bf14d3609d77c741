// Where com.onnxtrain.FlashAttention's operands sit, as every device's kernel reads them: Q (pairs, tq, d), K
// (kv, tk, d), V (kv, tk, dv) and Y (pairs, tq, dv) as rows (attention_rows.h: as they lie, or sequence-major), the
// mask and the bias read with strides over the scores; checked once per call. And whether the call drops
// probabilities.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/attention_rows.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {

struct AttentionGeometry {
  std::vector<int64_t> batch;  // Q's batch dims, the output's
  int64_t pairs = 0, tq = 0, tk = 0, d = 0, dv = 0;
  std::vector<int64_t> kv_strides;  // K's and V's batch index over `batch` (their heads repeated kv_groups times)
  // The mask's and the bias's over (batch..., tq, tk); empty without them.
  std::vector<int64_t> cond_strides, bias_strides;
  int64_t kv_count = 0, groups = 1, kv_heads = 1;  // kv_heads: K's last batch dim
  AttentionRows q, k, v, y;  // the operands' rows (dQ's, dK's, dV's and dY's as theirs)
  // packed (packed_heads): Q, K and V all in X, the first input, K's and V's first elements k_offset and v_offset on
  // (their gradients in dX, the one output, likewise)
  bool packed = false;
  int64_t k_offset = 0, v_offset = 0;
  int64_t offset(const std::vector<int64_t>& strides, int64_t pair) const;
  // K's and V's batch index of query pair `pair`.
  int64_t kv_of(int64_t pair) const;
};

// The geometry of a FlashAttention (or its gradient's) call whose Q, K, V, cond and bias are inputs q, k, v, cond
// and bias (the last two may be omitted); a ShapeError naming the node when they do not fit together.
AttentionGeometry attention_geometry(const KernelCtx& c, size_t q, size_t k, size_t v, size_t cond, size_t bias);

// The dropout rate of a call whose ratio and training mode are inputs `ratio` and `training` (read on the host): 0
// unless both are given and it trains; a ShapeError naming the node for a rate outside [0, 1).
double attention_dropout_rate(const KernelCtx& c, size_t ratio, size_t training);

}  // namespace onnxtrain::kernels
