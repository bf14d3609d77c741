// The GPU's parameter updates (kernels/parameter_update.h's, registered for CUDA devices): the checked tensors'
// pointers to parameter_update.cu's launchers, queued on the calling thread's stream (PyTorch's current one, from
// onnxtrain.optim; the run's, in backward).
#include "kernels/cuda/indexing.h"
#include "kernels/parameter_update.h"
#include "onnxtrain/error.h"

namespace onnxtrain::kernels::cuda {
namespace {

void* raw_or_null(Tensor* t) { return t ? t->raw() : nullptr; }

void checked(const std::string& where, const Tensor& x) {
  const DType t = x.dtype();
  if (t != DType::kFloat32 && t != DType::kBFloat16 && t != DType::kFloat16 && t != DType::kFloat64)
    throw UnsupportedError(where + ": the GPU updates float32, bfloat16, float16 and float64 parameters, not " +
                           dtype_name(t));
}

void adamw_update(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                  int64_t step, const AdamWHyper& h) {
  checked(where, x);
  adamw(x.dtype(), x.raw(), g.raw(), m.raw(), v.raw(), raw_or_null(max_v), x.numel(), h, step, stream());
}

void sgd_update(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h) {
  checked(where, x);
  sgd(x.dtype(), x.raw(), g.raw(), raw_or_null(buf), first, x.numel(), h, stream());
}

void accumulate_gradient(const std::string& where, Tensor& acc, const Tensor& g) {
  checked(where, acc);
  accumulate(acc.dtype(), acc.raw(), g.raw(), acc.numel(), stream());
}

const bool kRegistered =
    register_parameter_updates(DeviceType::kCuda, {adamw_update, sgd_update, accumulate_gradient});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
