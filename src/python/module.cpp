// The _onnxtrain extension: one init_<area> per file, no logic here.
#include <pybind11/pybind11.h>

#include "python/init.h"

PYBIND11_MODULE(_onnxtrain, m) {
  m.doc() = "onnxtrain's C++ runtime";
  onnxtrain::python::init_errors(m);
  onnxtrain::python::init_tensor(m);
  onnxtrain::python::init_memory(m);
  onnxtrain::python::init_session_options(m);
  onnxtrain::python::init_session(m);
  onnxtrain::python::init_training(m);
  onnxtrain::python::init_optim(m);
  onnxtrain::python::init_python_op(m);
  onnxtrain::python::init_cuda_setup(m);
}
