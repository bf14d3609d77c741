// The one place where C++ errors become Python exceptions.
#include "onnxtrain/error.h"
#include "python/init.h"

namespace py = pybind11;

namespace onnxtrain::python {

void init_errors(py::module_& m) {
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<ModelError> model_error(m, "ModelError", error.ptr());
  static py::exception<UnsupportedError> unsupported_error(m, "UnsupportedError", error.ptr());
  static py::exception<ShapeError> shape_error(m, "ShapeError", error.ptr());
  static py::exception<InputError> input_error(m, "InputError", error.ptr());
  static py::exception<OutOfMemoryError> oom_error(m, "OutOfMemoryError", error.ptr());
  static py::exception<IoError> io_error(m, "IoError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ModelError& e) {
      model_error(e.what());
    } catch (const UnsupportedError& e) {
      unsupported_error(e.what());
    } catch (const ShapeError& e) {
      shape_error(e.what());
    } catch (const InputError& e) {
      input_error(e.what());
    } catch (const OutOfMemoryError& e) {
      oom_error(e.what());
    } catch (const IoError& e) {
      io_error(e.what());
    } catch (const Error& e) {
      error(e.what());
    }
  });
}

}  // namespace onnxtrain::python
