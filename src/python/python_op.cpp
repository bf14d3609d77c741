// The calls com.onnxtrain.PythonOp's kernels make (kernels/python_op.h), to Python functions onnxtrain._python_op
// sets at import: each call takes the GIL, its tensors crossing by DLPack without copies (None for an unset one).
#include <pybind11/stl.h>

#include "kernels/python_op.h"
#include "python/dlpack_bridge.h"
#include "python/init.h"

namespace py = pybind11;

namespace onnxtrain::python {
namespace {

template <typename T>
py::list tensors_to_list(const std::vector<T*>& ts) {
  py::list l;
  for (T* t : ts) l.append(t ? to_python(*t) : py::none());
  return l;
}

}  // namespace

void init_python_op(py::module_& m) {
  m.def(
      "set_python_op_calls",
      [](py::function forward, py::function backward, py::function release) {
        // (held for the process's life: the kernels may call them until it ends)
        auto* f = new py::function(std::move(forward));
        auto* b = new py::function(std::move(backward));
        auto* r = new py::function(std::move(release));
        kernels::PythonOpCalls calls;
        calls.forward = [f](const std::string& key, const std::vector<const Tensor*>& in,
                            const std::vector<Tensor*>& out, bool keep) {
          py::gil_scoped_acquire gil;
          return (*f)(key, tensors_to_list(in), tensors_to_list(out), keep).cast<int64_t>();
        };
        calls.backward = [b](int64_t handle, const std::vector<const Tensor*>& dy, const std::vector<Tensor*>& dx) {
          py::gil_scoped_acquire gil;
          (*b)(handle, tensors_to_list(dy), tensors_to_list(dx));
        };
        calls.release = [r](int64_t handle) {
          if (!Py_IsInitialized()) return;
          py::gil_scoped_acquire gil;
          (*r)(handle);
        };
        kernels::set_python_op_calls(std::move(calls));
      },
      py::arg("forward"), py::arg("backward"), py::arg("release"),
      "Sets the functions com.onnxtrain.PythonOp's kernels call: forward(key, inputs, outputs, keep) -> handle, "
      "backward(handle, output_grads, input_grads), release(handle).");
}

}  // namespace onnxtrain::python
