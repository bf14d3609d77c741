// com.onnxtrain.PythonOp and PythonOpGrad on the host (kernels/python_op.h).
#include "kernels/kernel.h"
#include "kernels/python_op.h"

namespace onnxtrain::kernels {
namespace {

const bool kRegistered = register_kernels(kCpu, python_op_kernels());

}  // namespace
}  // namespace onnxtrain::kernels
