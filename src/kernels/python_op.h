// The calls com.onnxtrain.PythonOp and PythonOpGrad make into the host language: set once by the Python extension
// (onnxtrain._python_op), made by the two ops' kernels (one for every device). Without them, running either op is an
// UnsupportedError.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::kernels {

struct PythonOpCalls {
  // Runs the Function `key` names on `inputs`, writing its results into `outputs`; with `keep`, keeps what its
  // backward needs and returns a handle on it (else 0).
  std::function<int64_t(const std::string& key, const std::vector<const Tensor*>& inputs,
                        const std::vector<Tensor*>& outputs, bool keep)>
      forward;
  // The backward of the call `handle` kept: the outputs' gradients (null: zeros) into the inputs' (`dx`, zeros
  // where the Function gives none).
  std::function<void(int64_t handle, const std::vector<const Tensor*>& dy, const std::vector<Tensor*>& dx)> backward;
  // Lets go of what the call `handle` kept.
  std::function<void(int64_t handle)> release;
};

void set_python_op_calls(PythonOpCalls calls);
// The calls set; UnsupportedError naming `where` when none are.
const PythonOpCalls& python_op_calls(const std::string& where);

// The kernels of PythonOp and PythonOpGrad, the same on every device (each registers them): they hand the device's
// tensors to the calls as they are.
std::vector<KernelDef> python_op_kernels();

}  // namespace onnxtrain::kernels
