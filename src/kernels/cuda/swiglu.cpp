// The CUDA kernels of com.onnxtrain.SwiGLU and SwiGLUGrad (swiglu.cu's launchers): every input of one shape and
// float dtype, as on the CPU.
#include "kernels/cuda/indexing.h"

namespace onnxtrain::kernels::cuda {
namespace {

void swiglu_node(KernelCtx& c) {
  c.inputs_like_first(2);
  swiglu(c.in(0).dtype(), c.in(0).raw(), c.in(1).raw(), c.out(0).raw(), c.in(0).numel(), stream());
}

void swiglu_grad_node(KernelCtx& c) {
  c.inputs_like_first(3);
  swiglu_grad(c.in(0).dtype(), c.in(0).raw(), c.in(1).raw(), c.in(2).raw(), c.wants(0) ? c.out(0).raw() : nullptr,
              c.wants(1) ? c.out(1).raw() : nullptr, c.in(0).numel(), stream());
}

const bool kRegistered = register_kernels(cuda_device(0), {{"com.onnxtrain", "SwiGLU", kernel(swiglu_node)},
                                                           {"com.onnxtrain", "SwiGLUGrad", kernel(swiglu_grad_node)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
