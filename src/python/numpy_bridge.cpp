// numpy arrays <-> tensors without copies.
#include "python/numpy_bridge.h"

#include "onnxtrain/error.h"

namespace py = pybind11;

namespace onnxtrain::python {
namespace {

DType dtype_of(const py::dtype& d) {
  switch (d.char_()) {
    case 'f': return DType::kFloat32;
    case 'd': return DType::kFloat64;
    case 'e': return DType::kFloat16;
    case 'l': case 'q': return DType::kInt64;
    case 'i': return DType::kInt32;
    case 'b': return DType::kInt8;
    case 'B': return DType::kUInt8;
    case '?': return DType::kBool;
    default: throw InputError("numpy dtype '" + std::string(py::str(d)) + "' is not supported");
  }
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return py::dtype("float32");
    case DType::kFloat64: return py::dtype("float64");
    case DType::kFloat16: return py::dtype("float16");
    case DType::kInt64: return py::dtype("int64");
    case DType::kInt32: return py::dtype("int32");
    case DType::kInt8: return py::dtype("int8");
    case DType::kUInt8: return py::dtype("uint8");
    case DType::kBool: return py::dtype("bool");
    default: throw Error("dtype " + dtype_name(t) + " has no numpy equivalent");
  }
}

}  // namespace

// Borrows a C-contiguous array's memory; the array stays alive while the tensor does.
Tensor from_numpy(py::array a) {
  if (!(a.flags() & py::array::c_style)) a = py::array::ensure(a, py::array::c_style);
  std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
  DType t = dtype_of(a.dtype());
  auto* keep = new py::object(a);
  // Read-only arrays are fine: the executor never writes into external inputs.
  auto storage = Storage::borrow(const_cast<void*>(a.data()), size_t(a.nbytes()), [keep] {
    py::gil_scoped_acquire gil;
    delete keep;
  });
  return Tensor(t, dims, storage);
}

// Hands a tensor to numpy; the capsule owns a reference to its storage.
py::array to_numpy(const Tensor& t) {
  auto* owner = new std::shared_ptr<Storage>(t.storage());
  py::capsule cap(owner, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
  std::vector<py::ssize_t> shape(t.dims().begin(), t.dims().end());
  return py::array(numpy_dtype(t.dtype()), shape, t.raw(), cap);
}

std::map<std::string, Tensor> tensors_of(const py::dict& d) {
  std::map<std::string, Tensor> r;
  for (auto& [k, v] : d) {
    std::string name = py::str(k);
    r[name] = from_numpy(py::array::ensure(v));
  }
  return r;
}

py::dict arrays_of(const std::map<std::string, Tensor>& m) {
  py::dict r;
  for (auto& [name, t] : m) r[py::str(name)] = to_numpy(t);
  return r;
}


}  // namespace onnxtrain::python
