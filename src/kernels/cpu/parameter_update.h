// The host's parameter updates (kernels/parameter_update.h), over chunks of each tensor on every core.
#pragma once
#include "kernels/parameter_update.h"

namespace onnxtrain::kernels::cpu {

void adamw_update(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                  int64_t step, const AdamWHyper& h);
void sgd_update(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h);
void accumulate_gradient(const std::string& where, Tensor& acc, const Tensor& g);

}  // namespace onnxtrain::kernels::cpu
