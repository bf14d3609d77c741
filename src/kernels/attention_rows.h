// Where one of com.onnxtrain.FlashAttention's operands lies (Q, K, V or Y, and the gradient of each, which lies as
// it does), for every device's kernel: the attention reads each as (batch..., T, d) rows, a batch index p (a query
// pair's for Q and Y, a K and V batch index for K and V) and a sequence position r naming a row of d consecutive
// elements. As the ops' tensors lie, (batch..., T, d); sequence-major (B, T, H, d) ones (the op's sequence_major
// flags) hold a position's H heads side by side.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace onnxtrain::kernels {

struct AttentionRows {
  // Row r of batch index p starts at element p / heads * outer + p % heads * head + r * row.
  int64_t heads = 1, outer = 0, head = 0, row = 0;
  ONNXTRAIN_HOST_DEVICE int64_t at(int64_t p) const {
    return heads == 1 ? p * outer : p / heads * outer + p % heads * head;
  }
  ONNXTRAIN_HOST_DEVICE int64_t at(int64_t p, int64_t r) const { return at(p) + r * row; }
  // Whether the rows lie one after another, batch index after batch index (not sequence-major).
  ONNXTRAIN_HOST_DEVICE bool dense() const { return heads == 1; }
};

// The rows of an operand of (physical) dims `dims`: (batch..., T, d), or (B, T, H, d) where `sequence_major`.
inline AttentionRows attention_rows(const std::vector<int64_t>& dims, bool sequence_major) {
  const size_t n = dims.size();
  if (sequence_major) return {dims[2], dims[1] * dims[2] * dims[3], dims[3], dims[2] * dims[3]};
  return {1, n >= 2 ? dims[n - 2] * dims[n - 1] : 0, 0, n >= 1 ? dims[n - 1] : 0};
}

}  // namespace onnxtrain::kernels
