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
  static py::exception<CheckpointError> checkpoint_error(m, "CheckpointError", error.ptr());
  static py::exception<ConfigError> config_error(m, "ConfigError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ModelError& e) {
      py::set_error(model_error, e.what());
    } catch (const UnsupportedError& e) {
      py::set_error(unsupported_error, e.what());
    } catch (const ShapeError& e) {
      py::set_error(shape_error, e.what());
    } catch (const InputError& e) {
      py::set_error(input_error, e.what());
    } catch (const OutOfMemoryError& e) {
      py::set_error(oom_error, e.what());
    } catch (const IoError& e) {
      py::set_error(io_error, e.what());
    } catch (const CheckpointError& e) {
      py::set_error(checkpoint_error, e.what());
    } catch (const ConfigError& e) {
      py::set_error(config_error, e.what());
    } catch (const Error& e) {
      py::set_error(error, e.what());
    }
  });
}

}  // namespace onnxtrain::python
