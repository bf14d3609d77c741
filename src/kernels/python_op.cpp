#include "kernels/python_op.h"

#include "onnxtrain/error.h"

namespace onnxtrain::kernels {

static PythonOpCalls& calls() {
  static PythonOpCalls c;
  return c;
}

void set_python_op_calls(PythonOpCalls c) { calls() = std::move(c); }

const PythonOpCalls& python_op_calls(const std::string& where) {
  if (!calls().forward)
    throw UnsupportedError(where + ": a custom torch.autograd.Function runs only where the onnxtrain Python package "
                           "is loaded");
  return calls();
}

}  // namespace onnxtrain::kernels
