#include "python/dlpack_bridge.h"

#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include "core/allocator.h"
#include "onnxtrain/error.h"

namespace py = pybind11;

namespace onnxtrain::python {
namespace {

static_assert(int(DeviceType::kCpu) == kDLCPU && int(DeviceType::kCuda) == kDLCUDA &&
              int(DeviceType::kExtDev) == kDLExtDev);

// core/dtype.cpp's DLPack codes (and bool's 6, kDLBool from DLPack 0.8, which the 0.6 header Debian ships predates;
// PyTorch and numpy use the code).
static_assert(kDLInt == 0 && kDLUInt == 1 && kDLFloat == 2 && kDLBfloat == 4);

DLDataType dl_dtype(DType t) {
  for (const DTypeInfo& d : dtypes())
    if (d.dtype == t) return {d.dl_code, uint8_t(d.size * 8), 1};
  throw Error("dtype " + dtype_name(t) + " has no DLPack equivalent");
}

DType dtype_of(DLDataType d) {
  if (d.lanes != 1) throw InputError("DLPack tensors with " + std::to_string(d.lanes) + " lanes are not supported");
  for (const DTypeInfo& t : dtypes())
    if (t.dl_code == d.code && t.size * 8 == d.bits) return t.dtype;
  throw InputError("DLPack dtype (code " + std::to_string(d.code) + ", " + std::to_string(d.bits) +
                   " bits) is not supported");
}

// What an exported DLManagedTensor owns: a reference to the storage and the dims it points at.
struct Export {
  DLManagedTensor managed;
  std::shared_ptr<Storage> storage;
  std::vector<int64_t> dims;
};

// A Python-side handle on a tensor: onnxtrain.Tensor, and the queue of its device it was made on (QueueScope).
struct PyTensor {
  Tensor t;
  void* queue = nullptr;
};

// Whether a consumer reading on `stream` (DLPack's __dlpack__ argument) must wait for the work queued on the tensor
// first: unless it asks for no ordering (-1) or reads on the queue the tensor was made on. For CUDA, None and 1
// are the legacy default stream (onnxtrain's null queue), 2 the per-thread default (cudaStreamPerThread's handle,
// 2), any other value a stream's handle.
bool must_wait(const PyTensor& p, const py::object& stream) {
  if (p.t.device() == kCpu) return false;
  int64_t code = stream.is_none() ? 1 : stream.cast<int64_t>();
  if (code == -1) return false;
  return reinterpret_cast<void*>(code == 1 ? 0 : code) != p.queue;
}

py::capsule to_capsule(const Tensor& t) {
  auto* e = new Export{{}, t.storage(), t.dims()};
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.raw();
  d.device = {DLDeviceType(t.device().type), t.device().index};
  d.ndim = int32_t(e->dims.size());
  d.dtype = dl_dtype(t.dtype());
  d.shape = e->dims.data();
  d.strides = nullptr;  // contiguous
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); };
  // An unconsumed capsule frees what it exports; a consumer renames it and calls the deleter itself.
  return py::capsule(&e->managed, "dltensor", [](PyObject* cap) {
    if (!PyCapsule_IsValid(cap, "dltensor")) return;
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    m->deleter(m);
  });
}

Tensor from_capsule(py::capsule cap) {
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor")) throw InputError("not a DLPack capsule, or one already consumed");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  const DLTensor& d = m->dl_tensor;
  auto release = [m] {
    if (!m->deleter) return;
    py::gil_scoped_acquire gil;  // producers such as numpy release Python objects
    m->deleter(m);
  };
  Device device = kCpu;  // pinned host memory (kDLCUDAHost) is the host's
  if (d.device.device_type == kDLCUDA)
    device = cuda_device(d.device.device_id);
  else if (d.device.device_type != kDLCPU && d.device.device_type != kDLCUDAHost)
    throw InputError("DLPack tensor on device type " + std::to_string(d.device.device_type) +
                     ": onnxtrain takes host and CUDA memory");
  DType t = dtype_of(d.dtype);
  std::vector<int64_t> dims(d.shape, d.shape + d.ndim);
  if (d.strides) {  // contiguous strides, or any stride of a dim of size 1
    int64_t expect = 1;
    for (int32_t i = d.ndim - 1; i >= 0; --i) {
      if (dims[size_t(i)] != 1 && d.strides[i] != expect)
        throw InputError("DLPack tensor of dims " + dims_str(dims) + " is not contiguous (make it so first)");
      expect *= dims[size_t(i)];
    }
  }
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  auto storage = Storage::borrow(data, size_t(numel_of(dims)) * dtype_size(t), release, device);
  return Tensor(t, dims, storage);
}

}  // namespace

Tensor from_python(py::handle obj) {
  if (py::isinstance<PyTensor>(obj)) return obj.cast<PyTensor&>().t;
  if (py::isinstance<py::capsule>(obj)) return from_capsule(py::reinterpret_borrow<py::capsule>(obj));
  py::object source = py::reinterpret_borrow<py::object>(obj);
  if (!py::hasattr(source, "__dlpack__")) source = py::module_::import("numpy").attr("asarray")(source);
  try {
    return from_capsule(source.attr("__dlpack__")());
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_BufferError)) throw;
    // numpy refuses to export a read-only array through unversioned DLPack: take a copy.
    py::object copy = py::module_::import("numpy").attr("array")(source, py::arg("copy") = true);
    return from_capsule(copy.attr("__dlpack__")());
  }
}

py::object to_python(const Tensor& t) {
  return py::cast(PyTensor{t, t.device() == kCpu ? nullptr : CachingAllocator::of(t.device()).memory().queue()});
}

py::object to_numpy(const Tensor& t) {
  if (t.dtype() == DType::kBFloat16 || !(t.device() == kCpu)) return to_python(t);
  return py::module_::import("numpy").attr("from_dlpack")(to_python(t));
}

std::map<std::string, Tensor> tensors_of(const py::dict& d) {
  std::map<std::string, Tensor> r;
  for (auto& [k, v] : d) r[py::str(k)] = from_python(v);
  return r;
}

py::dict arrays_of(const std::map<std::string, Tensor>& m) {
  py::dict r;
  for (auto& [name, t] : m) r[py::str(name)] = to_numpy(t);
  return r;
}

py::dict tensors_to_python(const std::map<std::string, Tensor>& m) {
  py::dict r;
  for (auto& [name, t] : m) r[py::str(name)] = to_python(t);
  return r;
}

void init_tensor(py::module_& m) {
  m.def(
      "dtypes",
      [] {
        std::vector<std::pair<std::string, int>> r;
        for (const DTypeInfo& d : dtypes()) r.emplace_back(d.name, int(d.dtype));
        return r;
      },
      "Every dtype onnxtrain holds: [(name, ONNX code)], the name PyTorch's and numpy's (torch.<name>).");
  py::class_<PyTensor>(m, "Tensor",
                       "A tensor of onnxtrain's, shared without copies through DLPack: torch.from_dlpack(t), "
                       "numpy.from_dlpack(t).")
      .def(
          "__dlpack__",
          [](const PyTensor& p, py::object stream, py::object max_version, py::object dl_device, py::object copy) {
            if (!copy.is_none() && copy.cast<bool>()) throw InputError("__dlpack__: copy=True is not supported");
            if (must_wait(p, stream)) {  // the work queued on the tensor's queue completes first
              QueueScope on(p.t.device(), p.queue);
              CachingAllocator::of(p.t.device()).memory().synchronize();
            }
            return to_capsule(p.t);
          },
          py::arg("stream") = py::none(), py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
          py::arg("copy") = py::none())
      .def("__dlpack_device__",
           [](const PyTensor& p) { return py::make_tuple(int(p.t.device().type), p.t.device().index); })
      .def_property_readonly("device", [](const PyTensor& p) { return p.t.device().str(); })
      .def_property_readonly("shape", [](const PyTensor& p) { return py::tuple(py::cast(p.t.dims())); })
      .def_property_readonly("dtype", [](const PyTensor& p) { return dtype_name(p.t.dtype()); })
      .def_property_readonly(
          "data_ptr", [](const PyTensor& p) { return reinterpret_cast<uintptr_t>(p.t.raw()); },
          "The address of its first element.")
      .def(
          "numpy", [](const PyTensor& p) { return to_numpy(p.t); }, "A numpy array viewing it (not for bfloat16).")
      .def("__repr__", [](const PyTensor& p) {
        std::string on = p.t.device() == kCpu ? "" : ", " + p.t.device().str();
        return "onnxtrain.Tensor(" + dtype_name(p.t.dtype()) + dims_str(p.t.dims()) + on + ")";
      });
  m.def(
      "from_dlpack", [](py::object obj) { return to_python(from_python(obj)); }, py::arg("tensor"),
      "An onnxtrain.Tensor sharing the memory of anything with __dlpack__ (a torch tensor, a numpy array).");
  m.def(
      "device_available",
      [](const std::string& device) {
        try {
          CachingAllocator::of(parse_device(device));
          return true;
        } catch (const UnsupportedError&) {
          return false;
        }
      },
      py::arg("device"), "Whether this build and machine run on `device` ('cpu', 'cuda', 'cuda:N').");
}

}  // namespace onnxtrain::python
