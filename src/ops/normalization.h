// Typed attributes of LayerNormalization, BatchNormalization and InstanceNormalization, read by their kernels.
#pragma once
#include <cstdint>

namespace onnxtrain::ops {

struct NormAttrs {
  int64_t axis;  // LayerNormalization: the first normalized axis
  float epsilon;
  float momentum;  // BatchNormalization's running statistics
  bool training;   // BatchNormalization: batch statistics, running ones updated
  bool unbiased;   // onnxtrain's unbiased_running_var: PyTorch's update of running_var
  int64_t to = 0;  // com.onnxtrain's LayerNormalization and RMSNormalization: Y's dtype (0: X's)
};

}  // namespace onnxtrain::ops
