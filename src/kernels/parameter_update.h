// onnxtrain.optim's and TrainingSession's fused parameter updates: PyTorch's AdamW and SGD, each element's whole
// update in one pass (where PyTorch's single-tensor path makes five), in the parameter's dtype's compute type
// (float for float32, bfloat16 and float16, as PyTorch computes them). Each runs on the device its tensors are on
// (kernels/<device>/parameter_update.cpp); a device without one is an UnsupportedError.
#pragma once
#include <cstdint>

#include "kernels/parameter_math.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::kernels {

// One parameter's AdamW update at `step` (1 the first): x, its gradient g, the moving averages m and v (and, with
// amsgrad, the largest v so far, else null), all of one dtype and size. Throws InputError naming `where` when not.
void adamw_update(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                  int64_t step, const AdamWHyper& h);

// One parameter's SGD update; `buf` is the momentum buffer (null without momentum), which a first step sets to the
// gradient (as PyTorch's first step clones it).
void sgd_update(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h);

// acc += g: a gradient accumulated over steps (both of one dtype and size).
void accumulate_gradient(const std::string& where, Tensor& acc, const Tensor& g);

// A device type's update kernels, given the checked tensors (all on one device of that type).
struct ParameterUpdateKernels {
  void (*adamw)(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                int64_t step, const AdamWHyper& h);
  void (*sgd)(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h);
  void (*accumulate)(const std::string& where, Tensor& acc, const Tensor& g);
};
// Registers them for every device of `type`, as kernel files register theirs (kernels/kernel.h): once, from a
// static initializer of kernels/<device>/parameter_update.cpp.
bool register_parameter_updates(DeviceType type, ParameterUpdateKernels k);
// The update kernels registered for `type` (null when none): a device whose memory is the host's in disguise (the
// tests' second device) registers the host's as its own.
const ParameterUpdateKernels* parameter_updates_of(DeviceType type);

}  // namespace onnxtrain::kernels
