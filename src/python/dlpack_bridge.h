// Tensors cross between Python and onnxtrain by DLPack, without copies, for every dtype onnxtrain holds
// (bfloat16 and float16 included): anything with __dlpack__ (torch tensors, numpy arrays) comes in; out go
// onnxtrain.Tensor objects (they have __dlpack__), or numpy arrays viewing them where the caller wants numpy.
#pragma once
#include <pybind11/pybind11.h>

#include <map>
#include <string>

#include "onnxtrain/tensor.h"

namespace onnxtrain::python {

// The tensor behind a Python object: an onnxtrain.Tensor, anything with __dlpack__, or else what numpy.asarray
// makes of it (lists, scalars; a read-only array, which DLPack 0.6 cannot export, is copied).
Tensor from_python(pybind11::handle obj);
// An onnxtrain.Tensor (torch.from_dlpack takes it without a copy), recording the calling thread's queue of its
// device (QueueScope): the one its producer ran on.
pybind11::object to_python(const Tensor& t);
// A numpy array viewing the tensor through DLPack; an onnxtrain.Tensor for dtypes numpy lacks (bfloat16) and for
// memory numpy cannot read (a GPU's).
pybind11::object to_numpy(const Tensor& t);

std::map<std::string, Tensor> tensors_of(const pybind11::dict& d);
pybind11::dict arrays_of(const std::map<std::string, Tensor>& m);          // values by to_numpy
pybind11::dict tensors_to_python(const std::map<std::string, Tensor>& m);  // values by to_python

}  // namespace onnxtrain::python
