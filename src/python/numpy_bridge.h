// numpy arrays <-> tensors without copies, shared by the binding files.
#pragma once
#include <pybind11/numpy.h>

#include <map>
#include <string>

#include "core/tensor.h"

namespace onnxtrain::python {

Tensor from_numpy(pybind11::array a);
pybind11::array to_numpy(const Tensor& t);
std::map<std::string, Tensor> tensors_of(const pybind11::dict& d);
pybind11::dict arrays_of(const std::map<std::string, Tensor>& m);

}  // namespace onnxtrain::python
