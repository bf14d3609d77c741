// com.onnxtrain.PythonOp and PythonOpGrad on a GPU (kernels/python_op.h): the Function's PyTorch calls run on CUDA
// tensors, on PyTorch's current stream (the one the session's work goes on).
#include "kernels/kernel.h"
#include "kernels/python_op.h"

namespace onnxtrain::kernels::cuda {
namespace {

const bool kRegistered = register_kernels(cuda_device(0), python_op_kernels());

}  // namespace
}  // namespace onnxtrain::kernels::cuda
