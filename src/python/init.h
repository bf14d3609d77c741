#pragma once
#include <pybind11/pybind11.h>

namespace onnxtrain::python {

void init_errors(pybind11::module_& m);
void init_memory(pybind11::module_& m);
void init_optim(pybind11::module_& m);
void init_python_op(pybind11::module_& m);
void init_session(pybind11::module_& m);
void init_session_options(pybind11::module_& m);
void init_training(pybind11::module_& m);
void init_tensor(pybind11::module_& m);
void init_cuda_setup(pybind11::module_& m);

}  // namespace onnxtrain::python
