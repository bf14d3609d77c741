// com.onnxtrain.PythonOp and PythonOpGrad's typed attributes, read by their kernels: a custom
// torch.autograd.Function called from the graph (onnxtrain._python_op runs it).
#pragma once
#include <string>

namespace onnxtrain::ops {

struct PythonOpAttrs {
  std::string key;  // the Function and its non-tensor arguments (onnxtrain._capture.custom_functions)
};

}  // namespace onnxtrain::ops
